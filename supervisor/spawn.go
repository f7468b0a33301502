package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// write stores w.rec (see health.Store.Write), as the slot's owner: the
// write script refuses it unless this host holds the slot's lease (no host
// writes a record for a slot whose lease it does not hold, so the record
// names the lease holder: TestFencedHostDoesNotWriteOverTheNewOwner,
// health's TestWriteChecksTheOwner). A refusal for that reason fences the
// worker once the current event is handled. While Redis is unreachable it only
// marks w dirty: the record is written back when Redis returns. A refused
// write is returned; Redis errors are not (they are an outage).
func (s *Supervisor) write(w *worker, wr health.Write) error {
	if !w.holds() {
		// A fenced worker's record is the new owner's: never written.
		s.logw(w).Error("write refused: the slot is not this host's", "state", w.state.String())
		return ErrSlotMoving
	}
	w.rec.UpdatedAt = s.cfg.Clock.Now()
	if s.redis.down() {
		w.dirty = true
		return nil
	}
	wr.Owner = s.cluster.me
	ctx, cancel := s.opCtx()
	defer cancel()
	_, err := s.store.Write(ctx, w.rec, wr)
	var te *health.TransitionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		s.logw(w).Warn("status change refused", "err", err)
		return err
	case errors.Is(err, health.ErrNotOwner):
		s.lostToAnother(w, err)
		return err
	}
	w.dirty = true
	s.redisFailed(err)
	return nil
}

// lostToAnother fences w once the current event is handled: a write for
// its slot found the lease another host's.
func (s *Supervisor) lostToAnother(w *worker, err error) {
	s.logw(w).Warn("the slot is another host's: fencing the worker", "err", err)
	s.deferUntilIdle(func() {
		if s.workers[w.id] == w && legal(evFence, w.state) {
			s.fence(w)
		}
	})
}

// leaseStale reports whether this host has not renewed w's slot lease for
// a lease (Redis was away): the slot may be another host's by now, its
// lease lapsed, which would run it too: two live processes for one slot.
// No process is started for it until a renewal (holdStart;
// TestRestartDuringAnOutageLongerThanTheLease); a lost lease fences the
// worker instead.
func (s *Supervisor) leaseStale(w *worker) bool {
	return !w.heldAt.IsZero() && time.Since(w.heldAt) >= s.cfg.Lease
}

// startUnsafe reports whether no process may start for w now: Redis is
// away, or w's slot lease has not been renewed for a lease (leaseStale).
// While Redis is away the starting record cannot name the process: a host
// that takes the slot once this host's lease lapses finds no process to
// wait for and starts its own, beside ours. So a crashed worker's
// replacement waits for Redis (TestCrashDuringOutageDoesNotCascadeToFailed,
// TestRedisOutageCrashCounted). A worker needs Redis to do anything anyway.
func (s *Supervisor) startUnsafe(w *worker) bool {
	return s.redis.down() || s.leaseStale(w)
}

// holdStart puts t's start off until Redis answers and the slot's lease is
// renewed: the worker waits in backoff, its restart timer checking every
// third of a lease.
func (s *Supervisor) holdStart(t step) {
	s.logw(t.w).Info("start held: Redis away or the slot's lease not renewed for a lease",
		"redis_down", s.redis.down(), "since", time.Since(t.w.heldAt).Round(time.Millisecond))
	s.arm(t.w, timerRestart, s.cfg.Lease/3)
	t.to(stBackoff)
}

// errLeaseStale answers an operator's start while Redis is away or the
// slot's lease has not been renewed for a lease (see startUnsafe).
var errLeaseStale = fmt.Errorf("%w: Redis is away, or the slot's lease has not been renewed for a lease; try again once it answers", ErrSlotMoving)

// spawn starts w's process (t's worker, idle or in backoff). writeRestarts
// writes the restart history with the record (an operator restart of a
// failed worker changed it).
func (s *Supervisor) spawn(t step, actor health.Actor, writeRestarts bool) error {
	w := t.w
	now := s.cfg.Clock.Now()
	prev := w.rec
	r := &w.rec
	r.Status, r.Reason, r.Held = health.StatusStarting, "", false
	r.PID, r.HasExit, r.ExitCode, r.Signal = 0, false, 0, ""
	r.StartedAt, r.HealthySince, r.LastHeartbeat, r.CurrentJob = now, time.Time{}, time.Time{}, ""
	r.Host, r.Instance = s.cfg.Host, s.cfg.Instance
	if err := s.write(w, health.Write{Actor: actor, Restarts: writeRestarts, ClearHeartbeat: true, Index: true, NoEvent: true}); err != nil {
		w.rec = prev
		return err
	}
	w.sawBeat, w.kill, w.stop, w.expires, w.beatAt = false, killCause{}, nil, time.Time{}, time.Time{}
	if w.unjudged != nil {
		// An operator's start: the exit seen while Redis was away is not
		// judged (nor counted) any more.
		s.logw(w).Info("exit seen while Redis was away left uncounted: the worker is started again", "pid", w.unjudged.pid)
		w.unjudged = nil
	}
	switch actor {
	case health.ActorOperator:
		s.cfg.Metrics.Restart(w.id.Queue, "operator")
	case health.ActorTakeover:
		s.cfg.Metrics.Restart(w.id.Queue, "takeover")
	}
	w.procSince = time.Now()
	proc, err := s.startProcess(w.pool, w.id)
	if err != nil {
		s.logw(w).Error("spawn failed", "err", err)
		s.crashed(t, 0, health.ExitUnknown, "", "spawn failed: "+err.Error(), "spawn")
		return nil
	}
	w.proc = proc
	w.judgeFrom = proc.started
	w.outage = s.redis.outage()
	t.to(stRunning)
	r.PID = proc.pid
	s.logw(w).Info("worker started", "pid", proc.pid, "restart_count", r.Restarts.RestartCount)
	s.recordPID(w)
	s.arm(w, timerCheck, min(s.cfg.Heartbeat.TTL, s.cfg.Heartbeat.StartTimeout))
	return nil
}

// recordPID writes the new process's pid into its starting record. Until
// then the record has none, and no heartbeat adopts it, so a stale process
// of the slot cannot take a fresh record for its own (health's
// TestBeatDoesNotAdoptStartingWithoutPID,
// TestSetPIDRefusedWhenTheRecordNamesAnotherPID): the child's first beats
// wait for it.
func (s *Supervisor) recordPID(w *worker) {
	if s.redis.down() {
		return // w is dirty: the whole record is written when Redis returns
	}
	ctx, cancel := s.opCtx()
	err := s.store.SetPID(ctx, w.rec, s.cluster.me)
	cancel()
	switch {
	case err == nil:
	case errors.Is(err, health.ErrNotOwner), errors.Is(err, health.ErrPIDTaken):
		s.lostToAnother(w, err)
	case errors.Is(err, health.ErrNotFound):
		// Written a moment ago, gone now: Redis lost its data.
		w.dirty = true
		s.deferUntilIdle(func() { s.dataLost("the record of a worker just started is gone: Redis lost its data") })
	default:
		w.dirty = true
		s.redisFailed(err)
	}
}

// check is a heartbeat deadline (t's worker runs): read the key (which
// expires it on the spot if due) and judge, or re-arm for its new expiry.
//
// It is judged by its shard (see availability): during an outage of
// Redis (on a Cluster, of another shard), a worker whose shard answers is
// judged as usual. Not one whose shard is down, nor one whose record could
// not be written or whose process started meanwhile (its record may not
// name it): those are judged again after Redis returns, with a TTL of
// grace from their shard's return.
func (s *Supervisor) check(t step) {
	w := t.w
	sh := s.shardOf(w.id)
	if s.redis.down() && (sh == wholeRedis || s.redis.shardDown(sh) || w.dirty || w.outage == s.redis.outage()) {
		return // judged again after Redis returns (with a TTL of grace)
	}
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	probes, err := s.store.ProbeMany(ctx, []health.ComponentID{w.id})
	cancel()
	if err != nil {
		s.redis.shardLost(sh)
		s.redisFailed(err)
		return
	}
	s.answered(start, sh)
	p, now := probes[0], s.cfg.Clock.Now()
	hb := s.cfg.Heartbeat
	switch {
	case p.Value != "" && !health.ValidHeartbeat(p.Value):
		s.killFor(w, health.ExitBadHeartbeat, "bad_heartbeat", "invalid heartbeat "+quoteShort(p.Value))
	case p.TTL > 0:
		w.sawBeat, w.expires = true, now.Add(p.TTL)
		w.proc.slowGraced = false
		// From before the read: the monitor may wait between its reply
		// and now (a recovering window's TTL is longer than hb.TTL).
		w.beatAt = start.Add(min(p.TTL-hb.TTL, 0))
		if beaten(p.Status) && w.rec.Status == health.StatusStarting {
			w.rec.Status, w.rec.HealthySince = health.StatusHealthy, p.HealthySince
		}
		// At the key's expiry: a recovering window moved it further, and
		// the window's end is judged as any expiry
		// (TestRecoveringWindowOutlivesTTLThenExpiryIsACrash).
		s.arm(w, timerCheck, p.TTL+time.Millisecond)
	case p.Status == health.StatusNone || p.Instance == "":
		// Key and record gone (or the record re-created without what only
		// the supervisor writes): Redis lost its data between the last beat
		// and this deadline. Never a reason to kill, nor a crash to count
		// (only real crashes count: TestDataLossAtHeartbeatDeadlineKillsNothing):
		// write the state again and give every worker a TTL of grace.
		s.logw(w).Warn("heartbeat key and record gone at the deadline: Redis lost its data; writing the state again", "pid", w.proc.pid)
		s.deferUntilIdle(func() { s.dataLost("state written again after Redis lost its data (seen at a heartbeat deadline)") })
	case s.redis.answeredFor(sh, hb.TTL, now) > 0:
		// The shard did not answer for the whole TTL (a stall, an outage
		// just ended): the worker may have had no chance to beat. Judged
		// once it has answered for a TTL (TestRedisStallLongerThanTTLKillsNothing).
		s.arm(w, timerCheck, s.redis.answeredFor(sh, hb.TTL, now)+time.Millisecond)
	case w.sawBeat || beaten(p.Status):
		// Before the kill: did Redis restart unseen since the last beat
		// (restartUnseen)? A worker whose key the monitor never read
		// alive (its record says it beat) beat after its start at least.
		// Not after judgeFrom, which Redis's return moves (rewriteState):
		// a restart of this shard before an outage of another ended would
		// be missed, and on a Cluster a healthy worker killed
		// (TestUnseenRestartThenAnOutageOfAnother).
		switch s.restartUnseen(w, sh, latest(w.beatAt, w.proc.began)) {
		case unseenDown:
			return
		case unseenJudge:
			if d := s.redis.answeredFor(sh, hb.TTL, s.cfg.Clock.Now()); d > 0 {
				s.arm(w, timerCheck, d+time.Millisecond)
				return
			}
		}
		s.killFor(w, health.ExitHeartbeatTimeout, "hang", "heartbeat expired")
	default:
		left := func() time.Duration {
			return hb.StartTimeout - s.cfg.Clock.Now().Sub(latest(w.judgeFrom, s.redis.shardAnsweringSince(sh)))
		}
		if left() <= 0 {
			v := s.restartUnseen(w, sh, w.judgeFrom)
			if v == unseenDown {
				return
			}
			if v == unseenKill || left() <= 0 {
				s.killFor(w, health.ExitHeartbeatTimeout, "start_timeout", "no heartbeat within start_timeout")
				return
			}
		}
		s.arm(w, timerCheck, min(hb.Interval, left()))
	}
}

// beaten reports whether a stored status says the worker has beaten: it
// is healthy, or recovering (a window its heartbeat opened). In memory the
// supervisor holds both as healthy: the window lives in the key's TTL.
func beaten(s health.Status) bool {
	return s == health.StatusHealthy || s == health.StatusRecovering
}

func quoteShort(v string) string {
	if len(v) > 32 {
		v = v[:32] + "…"
	}
	return `"` + v + `"`
}

// killFor SIGKILLs w's group; its exit is then recorded with code and reason.
// cause labels the crash metric: hang, start_timeout or bad_heartbeat.
func (s *Supervisor) killFor(w *worker, code int, cause, reason string) {
	w.kill = killCause{code: code, reason: reason, cause: cause}
	s.logw(w).Warn("killing worker", "pid", w.proc.pid, "reason", reason, "exit_code", code)
	if err := signalGroup(w.proc.pid, sigKill); err != nil {
		s.logw(w).Error("kill", "err", err)
	}
}
