package supervisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

// errNotHolder is a local answer: another host holds the slot now, and the
// action is sent to that host.
var errNotHolder = errors.New("this host no longer holds the slot")

// ErrSlotMoving answers an action on a component whose slot is on its way
// to another host (drain, pool shrink, rebalance, or its lease lost): it is
// applied nowhere; try again once the slot has moved.
var ErrSlotMoving = fmt.Errorf("%w: the slot is moving to another host", ErrNoOwner)

// Components returns this host's components as the monitor holds them
// (not those whose lease it lost).
func (s *Supervisor) Components(ctx context.Context) ([]health.Component, error) {
	var out []health.Component
	err := s.call(ctx, func() {
		for _, id := range s.ids() {
			if w := s.workers[id]; w.holds() {
				out = append(out, w.rec)
			}
		}
	})
	return out, err
}

// Owns reports whether this host holds id's slot now. Actions need not
// check it: Restart, StopComponent and Reset reach the holder from any
// host.
func (s *Supervisor) Owns(id health.ComponentID) bool {
	var ok bool
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	defer cancel()
	_ = s.call(ctx, func() { ok = s.workers[id] != nil && s.workers[id].holds() })
	return ok
}

// anywhere runs an action here if this host holds id, else on the host
// that does.
func (s *Supervisor) anywhere(ctx context.Context, op string, id health.ComponentID, restart bool, local func() (health.Component, error)) (health.Component, error) {
	rec, err := local()
	if errors.Is(err, ErrUnknownComponent) || errors.Is(err, errNotHolder) {
		return s.forward(ctx, op, id, restart)
	}
	return rec, err
}

// action runs fn in the monitor for id's worker if ev is legal in its
// state, else answers why not; fn calls reply once the state is written
// (maybe later, after a process exits). It waits for the reply.
func (s *Supervisor) action(ctx context.Context, id health.ComponentID, ev event, fn func(t step, reply func(error))) (health.Component, error) {
	type result struct {
		rec health.Component
		err error
	}
	res := make(chan result, 1)
	err := s.call(ctx, func() {
		w := s.workers[id]
		switch {
		case w == nil:
			res <- result{err: fmt.Errorf("%s: %w", id, ErrUnknownComponent)}
			return
		case s.shuttingDown:
			res <- result{err: ErrStopped}
			return
		case !legal(ev, w.state):
			res <- result{err: refusal(w, ev)}
			return
		}
		t, _ := s.begin(w, ev)
		fn(t, func(err error) { res <- result{rec: w.rec, err: err} })
	})
	if err != nil {
		return health.Component{}, err
	}
	select {
	case r := <-res:
		return r.rec, r.err
	case <-ctx.Done():
		return health.Component{}, ctx.Err()
	}
}

// refusal is the answer to an operator action ev that w's state does not
// allow.
func refusal(w *worker, ev event) error {
	switch w.state {
	case stFenced, stGone:
		return fmt.Errorf("%s: %w", w.id, errNotHolder)
	case stReleasing:
		return fmt.Errorf("%s: %w", w.id, ErrSlotMoving)
	case stWaitingOld:
		return fmt.Errorf("%s: %w (waiting for its previous process to exit)", w.id, health.ErrTransition)
	case stWaitingStart:
		return fmt.Errorf("%s: %w (waiting for host %s to stop the process it was starting)", w.id, health.ErrTransition, w.rec.Host)
	}
	to := health.StatusStopped
	switch ev {
	case evOpRestart:
		to = health.StatusStarting
	case evOpRemove:
		to = health.StatusNone // removed
	}
	return &health.TransitionError{Component: w.id, From: w.rec.Status, Held: w.rec.Held, To: to, Actor: health.ActorOperator}
}

// Restart starts the component again now, bypassing backoff and not counted
// (docs/design.md §5). A running one is stopped gracefully first; a failed one
// gets its window and consecutive count cleared (lifetime kept); a held one
// is released.
func (s *Supervisor) Restart(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.anywhere(ctx, "restart", id, false, func() (health.Component, error) { return s.restartLocal(ctx, id) })
}

func (s *Supervisor) restartLocal(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.action(ctx, id, evOpRestart, func(t step, reply func(error)) {
		w := t.w
		switch {
		case w.state == stRunning || w.state == stStopping:
			s.stopWorker(t, "operator restart", false, &later{f: s.restartThen(w, reply), restart: true})
		case s.startUnsafe(w):
			// Refused, nothing changed: no start while the lease may be
			// another host's (TestRestartDuringAnOutageLongerThanTheLease).
			reply(errLeaseStale)
		case w.state == stIdle:
			failed := w.rec.Status == health.StatusFailed
			if failed {
				w.rec.Restarts = policy.OperatorRestart(w.rec.Restarts)
			}
			reply(s.spawn(t, health.ActorOperator, failed))
		case w.state == stBackoff:
			s.disarm(w, timerRestart)
			reply(s.spawn(t, health.ActorOperator, false))
		}
	})
}

// restartThen is the second half of a restart of a running worker, run
// once its process has stopped. It never starts a second process for the
// slot, nor one no supervisor tracks: it starts the worker only if it is
// still this host's, idle, and the host is not shutting down (a restart
// during a release or a fence never starts an unsupervised process:
// TestRestartDuringReleaseIsRefused); a restart queued behind another is
// answered by the process that one started
// (TestQueuedRestartsStartOneProcess).
func (s *Supervisor) restartThen(w *worker, reply func(error)) func(error) {
	return func(err error) {
		switch {
		case err != nil:
			reply(err)
		case s.shuttingDown:
			reply(ErrStopped)
		case w.state == stRunning, w.state == stBackoff:
			// An earlier restart queued with this one started it, or
			// holds its start until Redis answers and the lease is
			// renewed (TestQueuedRestartsStartOneProcess).
			reply(nil)
		case w.state != stIdle:
			reply(refusal(w, evOpRestart))
		default:
			t, _ := s.begin(w, evOpRestart)
			if s.startUnsafe(w) {
				// Stopped already: the start waits for the lease to be
				// renewed (TestRestartDuringAnOutageLongerThanTheLease).
				s.holdStart(t)
				reply(nil)
				return
			}
			reply(s.spawn(t, health.ActorOperator, false))
		}
	}
}

// StopComponent stops the component gracefully and holds it stopped.
func (s *Supervisor) StopComponent(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.anywhere(ctx, "stop", id, false, func() (health.Component, error) { return s.stopLocal(ctx, id) })
}

func (s *Supervisor) stopLocal(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.action(ctx, id, evOpStop, func(t step, reply func(error)) {
		s.stopWorker(t, "operator stop", true, &later{f: reply})
	})
}

// Reset clears the component's restart history and leaves it stopped and
// held; with restart it is started at once. A running component is refused
// (*health.TransitionError).
func (s *Supervisor) Reset(ctx context.Context, id health.ComponentID, restart bool) (health.Component, error) {
	return s.anywhere(ctx, "reset", id, restart, func() (health.Component, error) { return s.resetLocal(ctx, id, restart) })
}

func (s *Supervisor) resetLocal(ctx context.Context, id health.ComponentID, restart bool) (health.Component, error) {
	return s.action(ctx, id, evOpReset, func(t step, reply func(error)) {
		w := t.w
		if restart && s.startUnsafe(w) {
			// Refused whole, nothing changed: an answer that says the
			// action failed must not leave the slot reset and held, with
			// nobody to start it again
			// (TestResetAndRestartDuringAnOutageChangesNothing).
			reply(errLeaseStale)
			return
		}
		prev := w.rec
		w.rec.Restarts = policy.Reset(w.rec.Restarts)
		w.rec.Status, w.rec.Held, w.rec.Reason = health.StatusStopped, true, "reset"
		if err := s.write(w, health.Write{Actor: health.ActorOperator, Restarts: true}); err != nil {
			w.rec = prev
			reply(err)
			return
		}
		s.disarm(w, timerRestart)
		w.unjudged = nil // reset: nothing left to count
		t.to(stIdle)
		if restart {
			reply(s.spawn(t, health.ActorOperator, false))
			return
		}
		reply(nil)
	})
}
