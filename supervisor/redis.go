package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
)

// probeInterval is how often an unreachable Redis is tried again.
const probeInterval = 250 * time.Millisecond

// probeBudget is how many op_timeouts one probe may take in all, each of
// its calls bounded by one.
const probeBudget = 3

// redisFailed marks Redis unreachable after a failed call. From now until it
// answers again nothing is judged by heartbeat (docs/design.md §11: no worker is
// killed for a heartbeat it could not write), records are kept in memory,
// and process exits are still handled (those of processes started during
// the outage not counted).
//
// A Redis that answers but refuses the calls (READONLY from a replica,
// CLUSTERDOWN from a Cluster with a slot range uncovered, …) is an outage
// too: workers cannot beat either. Its line names the refusal and what it
// means, and vigil_redis_faults_total counts it by kind.
func (s *Supervisor) redisFailed(err error) {
	if !s.redis.lost() {
		return
	}
	kind := faultKind(err)
	s.cfg.Metrics.RedisFault(kind)
	if kind == kindUnreachable {
		s.log.Error("redis unreachable: holding state in memory, judging no heartbeats", "redis", redisconn.Addr(s.store.Client()), "err", err)
	} else {
		s.log.Error("redis refuses the supervisor's calls ("+kind+"): holding state in memory, judging no heartbeats",
			"kind", kind, "why", refusalWhy[kind], "redis", redisconn.Addr(s.store.Client()), "err", err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.probeRedis()
	}()
}

// kindUnreachable is the fault kind of a call that got no reply.
const kindUnreachable = "unreachable"

// refusalWhy are the error replies of a Redis that answers but refuses
// commands for a while, and what each means for an operator.
var refusalWhy = map[string]string{
	"READONLY":    "Redis answers as a replica: the address names a replica, not the master (after a failover, use Sentinel: redis-sentinel://)",
	"CLUSTERDOWN": "a slot range of the Redis Cluster has no master (a master and its replicas down, or slots not assigned)",
	"MASTERDOWN":  "the replica lost its link to its master",
	"TRYAGAIN":    "the Cluster is moving the keys' slot",
	"LOADING":     "Redis is loading its data set",
	"OOM":         "Redis is out of memory (maxmemory with noeviction)",
	"MISCONF":     "Redis cannot save its snapshot and refuses writes",
	"NOREPLICAS":  "fewer replicas than min-replicas-to-write answer",
	"BUSY":        "a script or function runs for too long",
}

// faultKind names a failed call's fault: the refusal Redis answered
// ("READONLY", "CLUSTERDOWN", …; also inside a script's error), or
// unreachable.
func faultKind(err error) string {
	msg := err.Error()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg = rerr.Error()
	}
	for _, f := range strings.Fields(msg) {
		if _, ok := refusalWhy[strings.TrimPrefix(f, "-")]; ok {
			return strings.TrimPrefix(f, "-")
		}
	}
	return kindUnreachable
}

// probeRedis tries Redis until it answers and takes a write, then tells
// the monitor.
func (s *Supervisor) probeRedis() {
	for {
		select {
		case <-s.dead:
			return
		case <-time.After(probeInterval):
		}
		// Until the monitor returns: a Stop does not wait for a probe.
		// Each call has op_timeout of its own (a PING, a write, and on a
		// Cluster a PING and CLUSTER INFO per master): a Redis that
		// answers every call within op_timeout is back, however slow its
		// round trips. One op_timeout for them all would never find a
		// Redis back whose round trip takes half of it: the first call
		// after an outage takes two (go-redis tries again on a new
		// connection) (TestRedisBackOnASlowLink).
		ctx, cancel := s.budgetCtx(s.over, probeBudget)
		err := pingAll(ctx, s.store.Client())
		if err == nil {
			err = s.probeWrite(ctx)
		}
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

// probeWrite writes a short-lived key in this host's slot: a PING is
// answered by a replica (READONLY to every write) and by a Cluster with a
// slot range uncovered (CLUSTERDOWN to every command with a key): back at
// each PING, Redis would be lost again at the next write, over and over,
// the heartbeats' grace counting from each false return. One outage is
// one return (failover's TestFailover, fault/readonly and
// fault/clusterdown: `make test-failover ONLY=fault/`).
//
// On a Cluster the nodes learn that every slot is served again one after
// the other (by gossip): every master must say cluster_state:ok, or a
// call to another shard is refused again right after the return.
func (s *Supervisor) probeWrite(ctx context.Context) error {
	c := s.store.Client()
	if err := c.Set(ctx, s.store.Keys().Prefix+"probe:{"+s.cfg.Host+"}", s.cfg.Instance, time.Second).Err(); err != nil {
		return err
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = fmt.Errorf("CLUSTERDOWN %s does not say cluster_state:ok", n.Options().Addr)
			}
			return err
		})
	}
	return nil
}

// pingAll pings Redis: on a Cluster, every master of the slot map, read
// afresh. A cluster client's own PING goes to one node (each in turn):
// during a failover a live one answers while the failed shard's slots
// still fail, and Redis would be declared back seconds before it is, then
// lost again at the next call to that shard, over and over, the
// heartbeats' grace counting from a return that was not one: Redis is
// back once per failover (failover's TestClusterFailoverRedisBackOnce,
// `make test-failover`). The slot map
// names the failed master until its replica is promoted: from then on
// every shard answers.
func pingAll(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
	}
	return nil
}

// onRedisUp writes back what changed while Redis was away, re-creates what
// it lost (it may have come back empty), requeues the tasks of processes
// reaped meanwhile, and gives every live worker one full TTL of grace.
func (s *Supervisor) onRedisUp() {
	s.redis.back(s.cfg.Clock.Now())
	for _, w := range s.workers {
		w.uncounted = 0
	}
	s.rewriteState("redis reachable again", true)
	// A tick at once: this host's record and leases, not written during
	// the outage, are renewed before they expire (a lease after their last
	// write), not up to a third of a lease later.
	select {
	case s.ticks <- struct{}{}:
	default:
	}
}

// dataLost answers Redis having lost its data with no failed call seen
// (noticed at a tick by this host's record gone, a slot lease gone before
// it could expire, or the record of a slot whose lease lapsed gone or
// re-created by its heartbeat; or by a worker's key and record gone at
// its heartbeat deadline): the configured pool sizes (if
// lost: see applyPoolSizes), the host record and every record gone are
// written again, every worker gets a TTL of grace. Nothing is killed for
// it.
func (s *Supervisor) dataLost(why string) {
	if s.redis.down() {
		return // the rewrite after the outage does it
	}
	calls := s.stepCalls()
	ctx, cancel := context.WithTimeout(calls.with(context.Background()), 5*s.cfg.OpTimeout)
	defer cancel()
	if err := s.applyPoolSizes(ctx, true); err != nil {
		s.redisFailed(err)
		return
	}
	if err := s.writeHost(ctx, s.holding()); err != nil {
		s.redisFailed(err)
		return
	}
	s.waited(calls)
	s.rewriteState(why, false)
}

// recordLost says whether stored, w's record as read from Redis, was lost
// (gone, or re-created by w's own worker's heartbeat), and whether another
// instance or process has written it since (not ours to write over).
func recordLost(w *worker, stored health.Component) (lost, taken bool) {
	// A record with no instance while ours has one was re-created by a
	// worker's heartbeat on an empty Redis: by ours, it lacks the restart
	// history and everything else only the supervisor knows; by another
	// process (another host's worker for the slot), it is not ours to
	// write over: our worker exits as stale, and the lease decides who runs
	// the slot (TestStaleExitIsNotACrash).
	recreated := stored.Instance == "" && w.rec.Instance != ""
	byOther := recreated && stored.PID != 0 && stored.PID != w.rec.PID
	lost = stored.Status == health.StatusNone || recreated && !byOther
	taken = stored.Instance != "" && stored.Instance != w.rec.Instance || byOther
	return lost, taken
}

// recordsLost reads the records of ws, whose slot leases this tick took
// again after a lapse or found held after a renewal that failed (it may
// have run unanswered and taken them again), and says whether Redis lost
// one (recordLost). A record another host wrote meanwhile is written again
// from this host's state. Either way the hold was broken (a lapse has
// moved heldSince already; an unsure renewal had not): an exit of the
// process started before is not a crash (holdBroken): another host may
// have taken the slot, stopped our process and given the slot up before
// our unanswered renewal took it again
// (TestLostRenewalReplyOverATakeoverCountsNoCrash).
func (s *Supervisor) recordsLost(ctx context.Context, ws []*worker) (bool, error) {
	var ids []health.ComponentID
	var rw []*worker
	for _, w := range ws {
		// A worker with no record of its own yet (waiting for an earlier
		// instance's process, after the loss of that record) has none to lose.
		if s.workers[w.id] == w && legal(evRewrite, w.state) && w.rec.Status != health.StatusNone {
			ids, rw = append(ids, w.id), append(rw, w)
		}
	}
	stored, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return false, fmt.Errorf("read the records of lapsed leases: %w", err)
	}
	for i, w := range rw {
		lost, taken := recordLost(w, stored[i])
		if lost || taken {
			w.heldSince = time.Now()
		}
		switch {
		case lost && !taken:
			s.logw(w).Warn("its record was lost while its lease lapsed or was renewed unanswered", "stored_status", stored[i].Status, "stored_instance", stored[i].Instance)
			return true, nil
		case taken:
			// Another host held the slot while the lease lapsed, and gave
			// it up; the lease is this host's again, so the record says
			// what this host does with the slot: an operator's stop left
			// under the other host's "stopped for a rebalance" would hold
			// the slot with no host to start it
			// (TestLapsedLeaseTakenBackRewritesAnotherHostsRecord). The
			// slot's restart history is the one that host left.
			s.logw(w).Warn("its record was another host's while its lease lapsed or was renewed unanswered: written again", "stored_host", stored[i].Host,
				"stored_status", stored[i].Status, "stored_reason", stored[i].Reason)
			w.rec.Restarts = stored[i].Restarts
			_ = s.write(w, health.Write{NoCheck: true, Index: true}) // refused: fenced; failed: written when Redis answers
		}
	}
	return false, nil
}

// rewriteState writes every record that changed while it could not be
// written, or that Redis lost (gone, or re-created by the worker's own
// heartbeat without what only the supervisor knows), requeues the tasks
// of processes reaped meanwhile, and gives every live worker one full TTL
// of grace (and restarts its start_timeout: no start is judged by time
// Redis was away). After an outage (afterOutage) on a Redis Cluster, the
// grace is its shard's: a TTL from that shard's return (the read below),
// none for a shard that answered all along. A record another instance
// wrote since (a host that took the slot over while this one could not
// reach Redis) is written again only if the lease is this host's again
// (that host gave the slot up:
// TestLapsedLeaseTakenBackRewritesAnotherHostsRecord); otherwise it is
// left alone, and the next renewal fences the worker if the lease is
// another's.
func (s *Supervisor) rewriteState(why string, afterOutage bool) {
	var ids []health.ComponentID
	for _, id := range s.ids() {
		if legal(evRewrite, s.workers[id].state) {
			ids = append(ids, id)
		}
	}
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout*5)
	stored, err := s.store.GetMany(ctx, ids)
	cancel()
	if err != nil {
		s.redisFailed(err)
		return
	}
	// Which records Redis lost and which another instance wrote, and the
	// leases of the latter.
	lost, taken := make([]bool, len(ids)), make([]bool, len(ids))
	var tk []string
	var tids []health.ComponentID
	for i, id := range ids {
		if lost[i], taken[i] = recordLost(s.workers[id], stored[i]); taken[i] {
			tk, tids = append(tk, s.store.Keys().Slot(id)), append(tids, id)
		}
	}
	ours := map[health.ComponentID]bool{}
	if len(tk) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout*5)
		hs, err := s.store.LeaseHolders(ctx, tk)
		cancel()
		if err != nil {
			s.redisFailed(err)
			return
		}
		for i, h := range hs {
			ours[tids[i]] = h == s.cluster.me
		}
	}
	shs := make([]shard, len(ids))
	for i, id := range ids {
		shs[i] = s.shardOf(id)
	}
	s.answered(start, shs...) // a shard that was down is back from now
	now := s.cfg.Clock.Now()
	rewritten := 0
	for i, id := range ids {
		w := s.workers[id]
		if beaten(stored[i].Status) && w.rec.Status == health.StatusStarting && stored[i].PID == w.rec.PID {
			w.rec.Status, w.rec.HealthySince = health.StatusHealthy, stored[i].HealthySince
		}
		write := (w.dirty || lost[i]) && !taken[i]
		if taken[i] && ours[id] {
			// Another host's since, and the lease this host's again (that
			// host gave the slot up): written again, with the slot's
			// restart history as that host left it
			// (TestLapsedLeaseTakenBackRewritesAnotherHostsRecord).
			w.rec.Restarts, write = stored[i].Restarts, true
		}
		if write {
			ctx, cancel := s.opCtx()
			_, err := s.store.Write(ctx, w.rec, health.Write{NoCheck: true, Restarts: !taken[i], Index: true, Owner: s.cluster.me})
			cancel()
			switch {
			case err == nil:
				w.dirty = false
				rewritten++
			case errors.Is(err, health.ErrNotOwner):
				s.lostToAnother(w, err)
			default:
				s.redisFailed(err)
				return
			}
		}
		if w.state == stRunning {
			w.judgeFrom = now
			grace := s.cfg.Heartbeat.TTL
			if afterOutage && shs[i] != wholeRedis {
				grace = max(s.redis.answeredFor(shs[i], grace, now), time.Millisecond)
			}
			s.arm(w, timerCheck, grace)
		}
	}
	s.recoverDeferred()
	s.log.Info(why, "records_rewritten", rewritten, "grace", s.cfg.Heartbeat.TTL)
}
