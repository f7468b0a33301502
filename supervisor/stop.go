package supervisor

import (
	"fmt"

	"github.com/vigil-dev/vigil/health"
)

// errSuperseded answers a queued operator restart that a later operator
// stop replaced: the last action asked for wins.
var errSuperseded = fmt.Errorf("%w: a stop was asked after this restart", health.ErrTransition)

// stopWorker stops t's worker: a running one gracefully (SIGTERM, SIGKILL
// after stop_timeout: stopping); one already stopping keeps its stop, held
// if this one is; one without a process is recorded stopped if it was
// crashed (or held now). then runs once the stop is recorded (nil) or
// cannot be (the error to answer).
func (s *Supervisor) stopWorker(t step, reason string, held bool, then *later) {
	w := t.w
	switch w.state {
	case stRunning:
		s.stopProcess(w, reason, held)
		t.to(stStopping)
		if then != nil {
			w.stop.then = append(w.stop.then, *then)
		}
	case stStopping:
		if held && !w.stop.held {
			w.stop.held = true
			// A stop after a queued restart wins over it.
			kept := w.stop.then[:0]
			for _, l := range w.stop.then {
				if l.restart {
					l.f(errSuperseded)
					continue
				}
				kept = append(kept, l)
			}
			w.stop.then = kept
		}
		if then != nil {
			w.stop.then = append(w.stop.then, *then)
		}
	case stIdle, stBackoff:
		s.disarm(w, timerRestart)
		w.unjudged = nil // stopped: an exit not judged yet stays uncounted
		if w.rec.Status == health.StatusCrashed || (held && !w.rec.Held && w.rec.Status == health.StatusStopped) {
			actor := health.ActorMonitor
			if held {
				actor = health.ActorOperator
			}
			w.rec.Status, w.rec.Held, w.rec.Reason = health.StatusStopped, held, reason
			_ = s.write(w, health.Write{Actor: actor})
		}
		t.to(stIdle)
		if then != nil {
			then.f(nil)
		}
	}
}

// stopProcess asks w's running process to stop: SIGTERM sent to its
// group, SIGKILL armed at stop_timeout, stopping written.
func (s *Supervisor) stopProcess(w *worker, reason string, held bool) {
	s.signalStop(w, reason, held)
	_ = s.write(w, health.Write{Actor: health.ActorMonitor})
}

// signalStop is stopProcess without the write, which may wait on Redis
// (op_timeout): the worker's stop_timeout starts now, whatever Redis does,
// so that a host shutdown on a paused Redis still stops its workers, and
// returns, in time (TestStopDuringATickOnAPausedRedis). The exit, seen
// by this goroutine only after the write, is recorded after it.
func (s *Supervisor) signalStop(w *worker, reason string, held bool) {
	w.stop = &stopReq{reason: reason, held: held}
	w.rec.Status = health.StatusStopping
	s.disarm(w, timerCheck)
	if err := signalGroup(w.proc.pid, sigTerm); err != nil {
		s.logw(w).Error("stop", "err", err)
	}
	s.arm(w, timerKill, s.cfg.StopTimeout)
}

// stopTimeout SIGKILLs a process that outlived its stop_timeout.
func (s *Supervisor) stopTimeout(w *worker) {
	if w.state != stFenced {
		w.stop.killed = true
		s.logw(w).Warn("stop timeout: killing", "pid", w.proc.pid, "stop_timeout", s.cfg.StopTimeout)
	}
	if err := signalGroup(w.proc.pid, sigKill); err != nil {
		s.logw(w).Error("kill", "err", err)
	}
}

// shutdown stops every running worker in parallel and cancels every
// restart timer (host shutdown), and ends every wait for a start in
// flight. Workers already stopping, releasing, fenced or waiting for an
// old process go on as they are.
//
// Every running worker gets SIGTERM before any record is written: the
// writes may each wait on Redis (TestStopDuringATickOnAPausedRedis).
func (s *Supervisor) shutdown() {
	s.shuttingDown = true
	var signalled []*worker
	for _, id := range s.ids() {
		w := s.workers[id]
		if w.state != stRunning {
			continue
		}
		if t, ok := s.begin(w, evShutdown); ok {
			s.signalStop(w, "host shutdown", false)
			t.to(stStopping)
			signalled = append(signalled, w)
		}
	}
	for _, w := range signalled {
		_ = s.write(w, health.Write{Actor: health.ActorMonitor})
	}
	for _, id := range s.ids() {
		w := s.workers[id]
		switch w.state {
		case stBackoff:
			if t, ok := s.begin(w, evShutdown); ok {
				s.stopWorker(t, "host shutdown", false, nil)
			}
		case stWaitingStart:
			// The wait ends (Stop is bounded by stop_timeout), nothing
			// is written: the record still says a start is in flight,
			// and whoever holds the slot next waits for it
			// (TestShutdownDuringTheWaitForAStartInFlight).
			if t, ok := s.begin(w, evShutdown); ok {
				s.disarm(w, timerStartGone)
				t.to(stIdle)
			}
		}
	}
}

// checkDrained closes drained once a shutdown has no process left to wait
// for.
func (s *Supervisor) checkDrained() {
	if !s.shuttingDown {
		return
	}
	for _, w := range s.workers {
		if w.proc != nil || w.state == stWaitingOld {
			return
		}
	}
	select {
	case <-s.drained:
	default:
		close(s.drained)
	}
}
