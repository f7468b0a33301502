package supervisor

import (
	"context"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// probeInterval is how often an unreachable Redis is tried again.
const probeInterval = 250 * time.Millisecond

// redisFailed marks Redis unreachable after a failed call. From now until it
// answers again nothing is judged by heartbeat (DESIGN.md §11: no worker is
// killed for a heartbeat it could not write), records are kept in memory,
// and process exits are still handled.
func (s *Supervisor) redisFailed(err error) {
	if s.redisDown {
		return
	}
	s.redisDown = true
	s.log.Error("redis unreachable: holding state in memory, judging no heartbeats", "err", err)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.probeRedis()
	}()
}

// probeRedis pings until Redis answers, then tells the monitor.
func (s *Supervisor) probeRedis() {
	for {
		select {
		case <-s.dead:
			return
		case <-time.After(probeInterval):
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
		err := s.store.Client().Ping(ctx).Err()
		cancel()
		if err == nil {
			select {
			case s.up <- struct{}{}:
			case <-s.dead:
			}
			return
		}
	}
}

// onRedisUp writes back what changed while Redis was away, re-creates what
// it lost (it may have come back empty), requeues the tasks of processes
// reaped meanwhile, and gives every live worker one full TTL of grace.
func (s *Supervisor) onRedisUp() {
	s.redisDown = false
	s.rewriteState("redis reachable again")
}

// rewriteState writes every record that changed while it could not be
// written, or that Redis lost (gone, or re-created by the worker's own
// heartbeat without what only the supervisor knows), requeues the tasks
// of processes reaped meanwhile, and gives every live worker one full TTL
// of grace. A record another instance wrote since (a host that took the
// slot over while this one could not reach Redis) is left alone: the next
// tick finds the lease lost and fences the worker.
func (s *Supervisor) rewriteState(why string) {
	ids := s.ids()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout*5)
	stored, err := s.store.GetMany(ctx, ids)
	cancel()
	if err != nil {
		s.redisFailed(err)
		return
	}
	rewritten := 0
	for i, id := range ids {
		w := s.workers[id]
		if stored[i].Status == health.StatusHealthy && w.rec.Status == health.StatusStarting && stored[i].PID == w.rec.PID {
			w.rec.Status, w.rec.HealthySince = health.StatusHealthy, stored[i].HealthySince
		}
		// A record with no instance while ours has one was re-created by
		// the worker's heartbeat on an empty Redis: it lacks the restart
		// history and everything else only the supervisor knows.
		lost := stored[i].Status == health.StatusNone || (stored[i].Instance == "" && w.rec.Instance != "")
		taken := stored[i].Instance != "" && stored[i].Instance != w.rec.Instance
		if (w.dirty || lost) && !taken && !w.fenced {
			ctx, cancel := s.opCtx()
			_, err := s.store.Write(ctx, w.rec, health.Write{NoCheck: true, Restarts: true, Index: true})
			cancel()
			if err != nil {
				s.redisDown = false // let redisFailed start a probe
				s.redisFailed(err)
				return
			}
			w.dirty = false
			rewritten++
		}
		pids := w.recover
		w.recover = nil
		for _, pid := range pids {
			s.recoverTasks(w, pid, "deferred")
		}
		if w.proc != nil && w.stop == nil && !w.fenced {
			s.arm(w, timerCheck, s.cfg.Heartbeat.TTL)
		}
	}
	s.log.Info(why, "records_rewritten", rewritten, "grace", s.cfg.Heartbeat.TTL)
}
