package supervisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

// Components returns this host's components as the monitor holds them.
func (s *Supervisor) Components(ctx context.Context) ([]health.Component, error) {
	var out []health.Component
	err := s.call(ctx, func() {
		for _, id := range s.ids() {
			out = append(out, s.workers[id].rec)
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
	_ = s.call(ctx, func() { ok = s.workers[id] != nil })
	return ok
}

// anywhere runs an action here if this host holds id, else on the host
// that does.
func (s *Supervisor) anywhere(ctx context.Context, op string, id health.ComponentID, restart bool, local func() (health.Component, error)) (health.Component, error) {
	rec, err := local()
	if errors.Is(err, ErrUnknownComponent) {
		return s.forward(ctx, op, id, restart)
	}
	return rec, err
}

// action runs fn in the monitor for id's worker; fn calls reply once the
// state is written (maybe later, after a process exits). It waits for the
// reply.
func (s *Supervisor) action(ctx context.Context, id health.ComponentID, fn func(w *worker, reply func(error))) (health.Component, error) {
	type result struct {
		rec health.Component
		err error
	}
	res := make(chan result, 1)
	err := s.call(ctx, func() {
		w := s.workers[id]
		if w == nil {
			res <- result{err: fmt.Errorf("%s: %w", id, ErrUnknownComponent)}
			return
		}
		if s.shuttingDown {
			res <- result{err: ErrStopped}
			return
		}
		fn(w, func(err error) { res <- result{rec: w.rec, err: err} })
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

// Restart starts the component again now, bypassing backoff and not counted
// (DESIGN.md §5). A running one is stopped gracefully first; a failed one
// gets its window and consecutive count cleared (lifetime kept); a held one
// is released.
func (s *Supervisor) Restart(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.anywhere(ctx, "restart", id, false, func() (health.Component, error) { return s.restartLocal(ctx, id) })
}

func (s *Supervisor) restartLocal(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.action(ctx, id, func(w *worker, reply func(error)) {
		switch {
		case w.proc != nil:
			s.stopWorker(w, "operator restart", false, func() {
				s.cfg.Metrics.Restart(w.id.Queue, "operator")
				reply(s.spawn(w, health.ActorMonitor, false))
			})
		case w.waiting:
			reply(fmt.Errorf("%s: %w (waiting for its previous process to exit)", id, health.ErrTransition))
		case w.rec.Status == health.StatusFailed:
			w.rec.Restarts = policy.OperatorRestart(w.rec.Restarts)
			reply(s.spawn(w, health.ActorOperator, true))
		default:
			s.disarm(w, timerRestart)
			reply(s.spawn(w, health.ActorOperator, false))
		}
	})
}

// StopComponent stops the component gracefully and holds it stopped.
func (s *Supervisor) StopComponent(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.anywhere(ctx, "stop", id, false, func() (health.Component, error) { return s.stopLocal(ctx, id) })
}

func (s *Supervisor) stopLocal(ctx context.Context, id health.ComponentID) (health.Component, error) {
	return s.action(ctx, id, func(w *worker, reply func(error)) {
		s.stopWorker(w, "operator stop", true, func() { reply(nil) })
	})
}

// Reset clears the component's restart history and leaves it stopped and
// held; with restart it is started at once. A running component is refused
// (*health.TransitionError).
func (s *Supervisor) Reset(ctx context.Context, id health.ComponentID, restart bool) (health.Component, error) {
	return s.anywhere(ctx, "reset", id, restart, func() (health.Component, error) { return s.resetLocal(ctx, id, restart) })
}

func (s *Supervisor) resetLocal(ctx context.Context, id health.ComponentID, restart bool) (health.Component, error) {
	return s.action(ctx, id, func(w *worker, reply func(error)) {
		if w.proc != nil || w.waiting {
			reply(&health.TransitionError{Component: id, From: w.rec.Status, To: health.StatusStopped, Actor: health.ActorOperator})
			return
		}
		s.disarm(w, timerRestart)
		prev := w.rec
		w.rec.Restarts = policy.Reset(w.rec.Restarts)
		w.rec.Status, w.rec.Held, w.rec.Reason = health.StatusStopped, true, "reset"
		if err := s.write(w, health.Write{Actor: health.ActorOperator, Restarts: true}); err != nil {
			w.rec = prev
			reply(err)
			return
		}
		if restart {
			reply(s.spawn(w, health.ActorOperator, false))
			return
		}
		reply(nil)
	})
}
