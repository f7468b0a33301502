package supervisor

import (
	"time"

	"github.com/vigil-dev/vigil/health"
)

// reconcile takes over what Redis says about this host's components
// (DESIGN.md §4.6) and starts what should run. Restarts made here are not
// counted.
func (s *Supervisor) reconcile(recs []health.Component) {
	for _, rec := range recs {
		w := &worker{id: rec.ID, pool: s.pool(rec.ID.Queue), rec: rec}
		s.workers[rec.ID] = w
		s.order = append(s.order, rec.ID)
		switch rec.Status {
		case health.StatusNone:
			w.rec = health.Component{ID: rec.ID, Restarts: rec.Restarts}
			s.spawn(w, health.ActorMonitor, false)
		case health.StatusFailed:
			s.logw(w).Warn("worker is failed: not started (reset it to start it)", "reason", rec.Restarts.FailureReason)
		case health.StatusStopped:
			if rec.Held {
				s.logw(w).Info("worker is held stopped: not started")
				continue
			}
			s.spawn(w, health.ActorMonitor, false)
		case health.StatusCrashed:
			s.afterOld(w, rec.PID)
		case health.StatusStarting, health.StatusHealthy, health.StatusStopping:
			to, reason := health.StatusCrashed, "supervisor restart"
			if rec.Status == health.StatusStopping {
				to, reason = health.StatusStopped, "supervisor restart"
			}
			w.rec.Status, w.rec.Reason = to, reason
			actor := health.ActorMonitor
			if rec.Host != "" && rec.Host != s.cfg.Host {
				actor = health.ActorTakeover
			}
			_ = s.write(w, health.Write{Actor: actor, NoCheck: true})
			s.afterOld(w, rec.PID)
		}
	}
	s.log.Info("supervisor started", "host", s.cfg.Host, "instance", s.cfg.Instance, "components", len(recs))
}

// afterOld starts w again once the process pid of an earlier supervisor is
// gone (its parent-death signal ends it; it gets VIGIL_SHUTDOWN_TIMEOUT to
// finish, plus a second, then its group is killed) and its tasks requeued.
func (s *Supervisor) afterOld(w *worker, pid int) {
	if !ownedProcessAlive(pid, w.id) {
		s.recoverTasks(w, pid)
		s.spawn(w, health.ActorMonitor, false)
		return
	}
	w.waiting = true
	s.logw(w).Info("waiting for the previous supervisor's worker to exit", "pid", pid)
	deadline := s.cfg.StopTimeout // = VIGIL_SHUTDOWN_TIMEOUT + 1s
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		start := time.Now()
		for ownedProcessAlive(pid, w.id) {
			if time.Since(start) > deadline {
				_ = signalGroup(pid, sigKill)
			}
			select {
			case <-s.dead:
				return
			case <-time.After(20 * time.Millisecond): // polling another process's /proc entry
			}
		}
		select {
		case s.gone <- goneMsg{id: w.id, pid: pid}:
		case <-s.dead:
		}
	}()
}

func (s *Supervisor) onGone(m goneMsg) {
	w := s.workers[m.id]
	if w == nil || !w.waiting {
		return
	}
	w.waiting = false
	s.recoverTasks(w, m.pid)
	if !s.shuttingDown {
		s.spawn(w, health.ActorMonitor, false)
	}
}
