package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// releaseUnwanted releases the slots this host should not hold: those
// beyond a shrunk pool, all of them while draining. A worker already
// leaving is left alone; one waiting for an earlier supervisor's process
// is released at a later tick (its slot must not be taken while that
// process lives).
func (s *Supervisor) releaseUnwanted() {
	for _, id := range s.ids() {
		w := s.workers[id]
		switch {
		case !legal(evRelease, w.state):
		case s.cluster.draining:
			s.release(w, "drain")
		case id.Slot >= s.cluster.sizes[id.Queue]:
			s.release(w, "pool shrink")
		}
	}
}

// rebalance hands one slot per tick to a host below its share, when this
// host holds more than its own: the last one it holds that runs or waits
// (not one an operator is stopping).
func (s *Supervisor) rebalance(p share) {
	if p.holding <= p.want || !p.others || s.cluster.draining {
		return
	}
	ids := s.ids()
	for i := len(ids) - 1; i >= 0; i-- {
		switch w := s.workers[ids[i]]; w.state {
		case stRunning, stIdle, stBackoff:
			s.release(w, "rebalance")
			return
		}
	}
}

// release gives w's slot up for another host: a running process is stopped
// gracefully first (releasing), and the slot is released once it exited;
// a stop in flight goes on and ends the same way; a worker without a
// process is let go at once.
func (s *Supervisor) release(w *worker, reason string) {
	t, ok := s.begin(w, evRelease)
	if !ok {
		return
	}
	s.logw(w).Info("releasing slot", "reason", reason)
	switch w.state {
	case stRunning:
		s.stopProcess(w, reason, false)
		t.to(stReleasing)
	case stStopping:
		t.to(stReleasing)
	case stIdle, stBackoff, stWaitingStart:
		// waiting_start: the record (starting, no pid) is left to
		// the next holder, which waits for that start in turn.
		s.disarm(w, timerRestart)
		s.disarm(w, timerStartGone)
		if w.rec.Status == health.StatusCrashed {
			w.rec.Status, w.rec.Held, w.rec.Reason = health.StatusStopped, false, reason
			_ = s.write(w, health.Write{Actor: health.ActorMonitor})
		}
		s.forget(t, true)
	}
}

// forget drops t's worker from this host, releasing its lease if asked.
// Never two processes for one slot: a lease is released only here, once
// the worker has no process (after its exit, or at once for one that had
// none), so no other host can take the slot while our process still runs
// it (TestRestartDuringReleaseIsRefused).
func (s *Supervisor) forget(t step, releaseLease bool) {
	w := t.w
	s.disarmAll(w)
	delete(s.workers, w.id)
	t.to(stGone)
	if !releaseLease {
		return
	}
	if s.redis.down() {
		s.cluster.unreleased = append(s.cluster.unreleased, w.rec)
		return
	}
	// A slot beyond its shrunk pool goes for good, its lease with it: its
	// keys are removed, its last state kept in a worker_removed event
	// (TestPoolShrinkRemovesSlotsBeyond); if Redis refuses, it is only
	// released.
	if s.beyondPool(w.id) {
		err := s.removeState(w)
		if err == nil {
			return
		}
		s.logw(w).Warn("remove worker beyond its pool; releasing its slot only", "err", err)
	}
	ctx, cancel := s.opCtx()
	defer cancel()
	if err := s.store.ReleaseSlot(ctx, w.id, s.cluster.me); err != nil {
		s.logw(w).Warn("release slot lease", "err", err)
		s.cluster.unreleased = append(s.cluster.unreleased, w.rec)
	}
}

// releaseLater gives up the leases that forget could not release (Redis
// did not answer) and shows those slots free: their leases would
// otherwise run out unseen by the other hosts, which read only the free
// set in steady state (see claim). A slot beyond its shrunk pool is
// removed instead, as forget would have (removeLater).
func (s *Supervisor) releaseLater(ctx context.Context) error {
	var ids []health.ComponentID
	for len(s.cluster.unreleased) > 0 {
		rec := s.cluster.unreleased[0]
		switch {
		case s.workers[rec.ID] != nil: // held again since
		case s.beyondPool(rec.ID):
			if err := s.removeLater(ctx, rec); err != nil {
				return err
			}
		default:
			if err := s.store.ReleaseSlot(ctx, rec.ID, s.cluster.me); err != nil {
				return err
			}
			ids = append(ids, rec.ID)
		}
		s.cluster.unreleased = s.cluster.unreleased[1:]
	}
	return s.store.MarkFree(ctx, ids)
}

// removeLater removes a slot beyond its pool whose release ended while
// Redis did not answer: its last record (stopped) is written, then its
// keys removed. Nothing else would: no host holds a slot beyond its pool,
// and the record said what it said before the outage (healthy, listed for
// good). Another host holding the slot meanwhile keeps it.
func (s *Supervisor) removeLater(ctx context.Context, rec health.Component) error {
	if rec.Status != health.StatusStopped && rec.Status != health.StatusFailed {
		rec.Status, rec.Held, rec.Reason = health.StatusStopped, false, "pool shrink"
	}
	rec.UpdatedAt = s.cfg.Clock.Now()
	// NoCheck: Redis still holds a state from before the outage (healthy,
	// stopping); the writes in between were refused, the process is gone.
	_, err := s.store.Write(ctx, rec, health.Write{Actor: health.ActorMonitor, NoCheck: true, Owner: s.cluster.me})
	if err == nil {
		err = s.store.Remove(ctx, rec, s.cluster.me, s.cfg.Clock.Now())
	}
	var te *health.TransitionError
	switch {
	case err == nil:
		s.log.Info("worker removed: its slot is beyond its pool", "component", rec.ID.String(),
			"restarts", rec.Restarts.LifetimeRestarts, "after", "redis unreachable")
		return nil
	case errors.Is(err, health.ErrNotOwner), errors.As(err, &te):
		s.log.Warn("remove worker beyond its pool", "component", rec.ID.String(), "err", err)
		return nil
	}
	return err
}

// fence stops w at once: its lease is another host's now (docs/design.md §11).
// No process outlives its supervisor's hold on the slot by more than
// stop_timeout: SIGTERM lets the worker hand back what it runs; SIGKILL
// follows at stop_timeout from the first stop, armed once, here, and never
// postponed by a later tick (TestFencedWorkerKilledAfterStopTimeout). The
// record belongs to the new owner: nothing is written for the slot again,
// actions on it go to the new holder, and what waited for its stop is
// answered with ErrSlotMoving when the process has exited.
func (s *Supervisor) fence(w *worker) {
	t, ok := s.begin(w, evFence)
	if !ok {
		return
	}
	s.logw(w).Warn("slot lease lost to another host: stopping the worker at once", "state", w.state.String())
	s.disarm(w, timerCheck)
	s.disarm(w, timerRestart)
	switch w.state {
	case stIdle, stBackoff, stWaitingOld, stWaitingStart:
		s.forget(t, false)
		return
	}
	if w.stop == nil {
		w.stop = &stopReq{reason: "fenced"}
		if err := signalGroup(w.proc.pid, sigTerm); err != nil {
			s.logw(w).Error("stop", "err", err)
		}
	}
	if !s.armed(w, timerKill) {
		s.arm(w, timerKill, s.cfg.StopTimeout)
	}
	t.to(stFenced)
}

// releaseAll gives up every lease this host holds (graceful shutdown),
// giving up at by, the stop's own budget: a graceful Stop returns within
// stop_timeout + 2 s even when one Redis Cluster shard does not answer and
// every release to it waits (the explorer's replay list,
// explore/testdata/seeds.txt, holds it).
func (s *Supervisor) releaseAll(by time.Time) {
	s.cluster.left = true // no tick may renew (re-take) a released lease
	if s.cfg.OnLeader != nil {
		s.cfg.OnLeader(false, time.Time{}) // before the lease goes: no fire after it
	}
	if s.redis.down() {
		return
	}
	// Bounded by 5 op_timeouts, and by the stop's own budget (see above),
	// but never less than a quarter of a second: a release is worth a try,
	// it saves the other hosts a lease's wait.
	now := time.Now()
	if most := now.Add(5 * s.cfg.OpTimeout); most.Before(by) {
		by = most
	}
	if least := now.Add(min(s.cfg.OpTimeout, 250*time.Millisecond)); by.Before(least) {
		by = least
	}
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	s.recoverDeferred() // what an outage left, before this host goes
	keys := s.store.Keys()
	for _, id := range s.ids() {
		if err := s.store.ReleaseSlot(ctx, id, s.cluster.me); err != nil {
			s.log.Warn("release slot lease", "component", id.String(), "err", err)
		}
	}
	if s.cluster.leader {
		_ = s.store.Release(ctx, keys.Leader(), s.cluster.me)
	}
	s.cluster.leader = false
	if err := s.store.Client().Del(ctx, keys.Host(s.cfg.Host)).Err(); err != nil {
		s.log.Warn("remove host record", "err", err)
	}
	// Stopped, not lost: the leader neither announces nor alerts it.
	if err := s.store.Client().HSet(ctx, keys.Control(), fieldLostPrefix+s.cfg.Host, "stopped").Err(); err != nil {
		s.log.Warn("record a graceful stop", "err", err)
	}
	s.hostEvent(ctx, "stopped", "")
}
