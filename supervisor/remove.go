package supervisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/vigil-dev/vigil/health"
)

// ErrInPool refuses to remove a slot within its pool's size: shrink the
// pool first.
var ErrInPool = fmt.Errorf("%w: the slot is within its pool's size (shrink the pool first)", health.ErrTransition)

// beyondPool reports whether id's slot is at or beyond its pool's size as
// this host last read it (a queue with no known pool: no).
func (s *Supervisor) beyondPool(id health.ComponentID) bool {
	n, ok := s.cluster.sizes[id.Queue]
	return ok && id.Slot >= n
}

// removeState deletes w's keys for good (record, restart history,
// heartbeat, counters, pause, lease) and drops it from the index, with a
// worker_removed event that keeps its history
// (TestPoolShrinkRemovesSlotsBeyond). The caller holds the slot's lease
// and w has no process.
func (s *Supervisor) removeState(w *worker) error {
	ctx, cancel := s.opCtx()
	defer cancel()
	if err := s.store.Remove(ctx, w.rec, s.cluster.me, s.cfg.Clock.Now()); err != nil {
		return err
	}
	s.logw(w).Info("worker removed: its slot is beyond its pool", "restarts", w.rec.Restarts.LifetimeRestarts)
	return nil
}

// Remove deletes a stopped (or failed) component whose slot is at or
// beyond its pool's size, for good: the host holding its slot does it, or
// this one when no host holds it. It answers ErrInPool within the pool, a
// *health.TransitionError (409) while it runs or waits to restart.
func (s *Supervisor) Remove(ctx context.Context, id health.ComponentID) error {
	sizes, err := PoolSizes(ctx, s.store)
	if err != nil {
		return err
	}
	if n, ok := sizes[id.Queue]; ok && id.Slot < n {
		return fmt.Errorf("%s: %w", id, ErrInPool)
	}
	_, err = s.removeLocal(ctx, id)
	if !errors.Is(err, ErrUnknownComponent) && !errors.Is(err, errNotHolder) {
		return err
	}
	holders, err := s.store.LeaseHolders(ctx, []string{s.store.Keys().Slot(id)})
	if err != nil {
		return err
	}
	if holders[0] != "" {
		_, err := s.forward(ctx, "remove", id, false)
		return err
	}
	// No holder: nothing can start it meanwhile (a start takes the lease,
	// and the script refuses once there is one).
	c, err := s.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.store.Remove(ctx, c, "", s.cfg.Clock.Now()); errors.Is(err, health.ErrNotOwner) {
		return fmt.Errorf("%w: %v", ErrNoOwner, err) // a host took the slot meanwhile
	} else if err != nil {
		return err
	}
	return nil
}

func (s *Supervisor) removeLocal(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.action(ctx, id, evOpRemove, func(t step, reply func(error)) {
		w := t.w
		switch {
		case !s.beyondPool(id):
			reply(fmt.Errorf("%s: %w", id, ErrInPool))
		case w.rec.Status != health.StatusStopped && w.rec.Status != health.StatusFailed:
			reply(&health.TransitionError{Component: id, From: w.rec.Status, Held: w.rec.Held, To: health.StatusNone, Actor: health.ActorOperator})
		default:
			if err := s.removeState(w); err != nil {
				reply(err)
				return
			}
			s.forget(t, false)
			reply(nil)
		}
	})
}
