package supervisor

import (
	"context"
	"slices"
	"time"

	"github.com/vigil-dev/vigil/health"
)

func (s *Supervisor) armTick() {
	if s.cluster.tick != nil {
		s.cluster.tick()
	}
	d := s.cfg.Lease / 3
	if s.cluster.early > 0 && s.cluster.early < d {
		d = s.cluster.early // a lost host's lease expires before the next tick
	}
	s.cluster.early = 0
	// Leases expire on Redis's clock, so ticks follow real time whatever
	// clock the rest of the supervisor uses.
	t := time.AfterFunc(d, func() {
		select {
		case s.ticks <- struct{}{}:
		default:
		}
	})
	s.cluster.tick = t.Stop
}

// tick runs every third of a lease. While the host shuts down it only
// renews the leases of the workers still stopping (never two processes for
// one slot: a slot must not be taken while its process lives;
// TestStopWhileAShutdownTickWaits); while Redis is unreachable it does
// nothing (nothing is fenced or moved then).
func (s *Supervisor) tick(first bool) {
	if s.cluster.left {
		return // the host left the cluster: its leases are released
	}
	defer s.armTick()
	if s.redis.down() {
		return
	}
	// A tick that a Stop catches waiting on Redis gives up, or the Stop
	// waits behind it (TestStopDuringATickOnADeadShard): the
	// shutdown runs in this goroutine, after it. What it did not finish
	// is what a lost reply leaves (a lease taken and not known expires);
	// its failure says nothing of Redis. The shutdown's own ticks, which
	// renew the leases of workers still stopping, run to their end.
	//
	// A shutdown's tick is one renewal, one round trip: it waits one
	// op_timeout at most. Meanwhile the monitor can neither SIGKILL a
	// worker past its stop_timeout nor see an exit, and a Stop must end
	// within stop_timeout + 2 s, which 5 op_timeouts there would outlast
	// (TestStopWhileAShutdownTickWaits).
	//
	// Each call has op_timeout of its own within the budget (boundCalls):
	// a Stop that cancels the tick waits for the call in flight only, not
	// for the rest of the tick's budget (TestStopDuringATickOnAPausedRedis).
	base, budget := context.Background(), 1
	if !s.shuttingDown {
		base, budget = s.leaving, 5
	}
	ctx, cancel := s.budgetCtx(base, budget)
	defer cancel()
	var err error
	if s.shuttingDown {
		err = s.renewAndFence(ctx)
	} else {
		err = s.clusterTick(ctx, first)
	}
	if err != nil && base.Err() == nil {
		s.redisFailed(err)
	}
	if first {
		s.log.Info("supervisor started", "host", s.cfg.Host, "instance", s.cfg.Instance, "components", len(s.workers))
	}
}

// clusterTick is one tick's steps, in the order they must run.
func (s *Supervisor) clusterTick(ctx context.Context, first bool) error {
	// 1. Renew what we hold; fence what we lost. The renewal is timed for
	// the availability judgement; so is each call of the later steps
	// (stepCalls): while one waits on Redis the monitor makes no other call,
	// the pulse included, and a window it could not watch is a stall like
	// any other (TestTickHeldWhileWorkersCannotBeatKillsNothing). A step
	// that fails is an outage of Redis (the tick's caller
	// says so), judged as one: on a Cluster, the shards that answer are
	// judged on.
	if err := s.renewAndFence(ctx); err != nil {
		return err
	}
	calls := s.stepCalls()
	ctx = calls.with(ctx)
	defer s.waited(calls)
	// 2. Read pool sizes, drain flags and hosts.
	ctl, err := s.readControl(ctx)
	if err != nil {
		return err
	}
	// 3. Our own record gone although no call failed: Redis lost its data.
	// Or it expired: not written for a lease, Redis refusing or not
	// answering meanwhile (the tick right after an outage rewrites it, but
	// an outage that began a tick after the last write and lasted two
	// thirds of a lease outlives it). An expiry cannot be told from a loss
	// during that time (a stall longer than the lease, and the data lost
	// in it), so both are handled as a loss: the records gone are written
	// again (the ones still there are left as they are). Taken for an
	// expiry alone, the record of a worker an operator had stopped, its
	// hold with it, would be gone for good
	// (TestDataLossDuringAStallLongerThanTheLease).
	//
	// A lease this host held that was gone before it could expire says the
	// same: a loss between a tick's read of the hosts and its write of its
	// own record leaves that record re-created by the write, and the next
	// tick sees only the leases gone (TestDataLossThatLeavesTheHostRecord).
	//
	// A lease taken again after a lapse says nothing either way: Redis may
	// have lost its data meanwhile, which this host's record, written again
	// since, does not show (a tick slow for most of a lease, and the data
	// lost in it after its read of the hosts). The records of those slots
	// are read: one gone, or re-created by the worker's heartbeat, is lost
	// data (TestDataLossBeforeALateRenewal).
	lostLease, lapsed := s.cluster.leaseLost, s.cluster.lapsed
	s.cluster.leaseLost, s.cluster.lapsed = false, nil
	listedHere := listed(ctl.hosts, s.cfg.Host)
	lostRecord := false
	if !first && !lostLease && listedHere && len(lapsed) > 0 {
		if lostRecord, err = s.recordsLost(ctx, lapsed); err != nil {
			s.cluster.lapsed = lapsed // read at the next tick (the leases are held again by then)
			return err
		}
	}
	if !first && (lostLease || lostRecord || !listedHere) {
		why := "state written again after Redis lost its data"
		switch {
		case lostLease:
			s.log.Warn("a slot lease was gone before it could expire: Redis lost its data; writing the state again")
		case lostRecord:
			s.log.Warn("a slot lease lapsed (or was renewed unanswered) and a worker's record was lost meanwhile: Redis lost its data; writing the state again")
		case time.Since(s.cluster.hostWritten) >= s.cfg.Lease:
			s.log.Info("this host's record expired while Redis did not take it, or Redis lost it; writing the state again")
			why = "state written again after this host's record expired or was lost"
		default:
			s.log.Warn("this host's record is gone from Redis: it lost its data; writing the state again")
		}
		s.cluster.scanNext = true // the free set went with the rest
		s.dataLost(why)
		if s.redis.down() {
			return nil
		}
	}
	// 4. Release what we should not hold: slots beyond a shrunk pool, all
	// of them while draining.
	s.releaseUnwanted()
	if err := s.releaseLater(ctx); err != nil {
		return err
	}
	// 5. Claim free slots up to our fair share.
	p, err := s.claim(ctx, ctl, first)
	if err != nil {
		return err
	}
	// 6. Hand one extra slot per tick to a host below its share.
	s.rebalance(p)
	// 7. Our host record, then 8. the leader's lease and chores (which
	// read the availability judgement: told of the slow calls so far).
	if err := s.writeHost(ctx, s.holding()); err != nil {
		return err
	}
	s.waited(calls)
	return s.leaderTick(ctx, ctl)
}

// readRecordAtTick has this tick read w's record for a loss of Redis's
// data (cluster.lapsed, recordsLost).
func (s *Supervisor) readRecordAtTick(w *worker) {
	if !s.shuttingDown && !slices.Contains(s.cluster.lapsed, w) {
		s.cluster.lapsed = append(s.cluster.lapsed, w)
	}
}

// renewAndFence renews the leases of the slots this host holds, in one
// round trip, and fences the workers whose lease another host has taken.
// A fenced worker's lease is not renewed and it is fenced once: its SIGKILL
// is never postponed (TestFencedWorkerKilledAfterStopTimeout).
func (s *Supervisor) renewAndFence(ctx context.Context) error {
	var held []*worker
	for _, id := range s.ids() {
		if w := s.workers[id]; w.holds() {
			held = append(held, w)
		}
	}
	if len(held) == 0 {
		s.cluster.renewFailed = false // nothing held that a failed renewal can have taken again
		return nil
	}
	keys := make([]string, len(held))
	for i, w := range held {
		keys[i] = s.store.Keys().Slot(w.id)
	}
	// The renewal is the monitor's pulse: one round trip every tick, timed
	// for the availability judgement (a stall is seen by it).
	start, sent := s.cfg.Clock.Now(), time.Now()
	rs, err := s.store.RenewLeases(ctx, keys, s.cluster.me, s.cfg.Lease)
	if err != nil {
		s.cluster.renewFailed = true // it may have run (see below)
		return err
	}
	// A renewal after a failed one: the failed one may have run
	// unanswered and found a lease gone (Redis lost its data) and taken it
	// again; this one then finds it held. So may a renewal sent again
	// within RenewLeases (health.LeaseHeldUnsure). Those leases are held,
	// but whether Redis lost their data is read from their records.
	afterFailed := s.cluster.renewFailed
	s.cluster.renewFailed = false
	unsure := 0
	s.answered(start, s.shardsOf(held)...)
	for i, w := range held {
		r := rs[i]
		if r == health.LeaseHeld && afterFailed {
			r = health.LeaseHeldUnsure
		}
		stale := (r == health.LeaseHeld || r == health.LeaseHeldUnsure) && s.leaseStale(w)
		if stale {
			// This host's, but not renewed for a lease: it may have lapsed,
			// been another host's (whose takeover stopped our process) and
			// been taken again by a renewal of ours whose reply was lost
			// (sent before an outage, run by Redis after it). Not known
			// unbroken: judged as taken again, so that an exit meanwhile
			// counts no crash (TestLostRenewalAfterALapseCountsNoCrash).
			r = health.LeaseRetaken
		}
		switch r {
		case health.LeaseLost:
			s.fence(w)
		case health.LeaseRetaken:
			// Gone since the last renewal: it lapsed (Redis was away for
			// longer than a lease) or vanished (Redis lost its data). It
			// was nobody's for a while and may have been another host's,
			// whose takeover may have stopped our process (see holdBroken).
			if stale {
				s.logw(w).Warn("slot lease not renewed for a lease: judged as taken again", "last_held", sent.Sub(w.heldAt).Round(time.Millisecond))
			} else {
				s.logw(w).Warn("slot lease was gone: taken again", "last_held", sent.Sub(w.heldAt).Round(time.Millisecond))
			}
			// Renewed at heldAt, it would expire a lease after that at the
			// earliest: gone sooner, Redis lost it (and whatever else).
			// Renewed more than a lease ago, it may have lapsed, and Redis
			// may have lost its data meanwhile: the tick reads its record.
			if !w.heldAt.IsZero() && !s.leaseStale(w) {
				s.cluster.leaseLost = true
			} else {
				s.readRecordAtTick(w)
			}
			w.heldAt, w.heldSince = sent, sent
		case health.LeaseHeldUnsure:
			// Held since the last renewal but for a loss of Redis's data
			// (a lapse is stale, above): heldSince moves only if the
			// record read shows a loss or another host (recordsLost).
			unsure++
			s.readRecordAtTick(w)
			w.heldAt = sent
		default:
			w.heldAt = sent
		}
	}
	if unsure > 0 {
		s.log.Info("leases held, as a renewal after a failed one found them: reading their records for a loss of Redis's data", "leases", unsure)
	}
	return nil
}
