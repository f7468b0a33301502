package supervisor

import (
	"time"

	"github.com/vigil-dev/vigil/health"
)

// adopt takes over what Redis says about a component whose slot this host
// has just claimed (DESIGN.md §4.6, §11) and starts it if it should run.
// Restarts made here are not counted.
func (s *Supervisor) adopt(id health.ComponentID, rec health.Component) {
	w := &worker{id: id, pool: s.pool(id.Queue), rec: rec}
	w.rec.ID = id
	s.workers[id] = w
	ours := rec.Host == "" || rec.Host == s.cfg.Host
	switch rec.Status {
	case health.StatusNone:
		w.rec = health.Component{ID: id, Restarts: rec.Restarts}
		s.spawn(w, health.ActorMonitor, false)
	case health.StatusFailed:
		s.logw(w).Warn("worker is failed: not started (reset it to start it)", "reason", rec.Restarts.FailureReason)
	case health.StatusStopped:
		if rec.Held {
			s.logw(w).Info("worker is held stopped: not started")
			return
		}
		s.spawn(w, health.ActorMonitor, false)
	case health.StatusCrashed:
		if !ours {
			s.spawn(w, health.ActorMonitor, false)
			return
		}
		s.afterOld(w, rec.PID)
	case health.StatusStarting, health.StatusHealthy, health.StatusStopping:
		if !ours {
			// Its host is gone (its lease expired): start it here. Its
			// tasks come back through asynq's lease recovery.
			s.logw(w).Info("taking over slot from a lost host", "from", rec.Host)
			s.spawn(w, health.ActorTakeover, false)
			return
		}
		to := health.StatusCrashed
		if rec.Status == health.StatusStopping {
			to = health.StatusStopped
		}
		w.rec.Status, w.rec.Reason = to, "supervisor restart"
		_ = s.write(w, health.Write{Actor: health.ActorMonitor, NoCheck: true})
		s.afterOld(w, rec.PID)
	}
}

// afterOld starts w again once the process pid of an earlier supervisor is
// gone (its parent-death signal ends it; it gets VIGIL_SHUTDOWN_TIMEOUT to
// finish, plus a second, then its group is killed) and its tasks requeued.
func (s *Supervisor) afterOld(w *worker, pid int) {
	if !ownedProcessAlive(pid, w.id) {
		s.recoverTasks(w, pid, "supervisor_restart")
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
	s.recoverTasks(w, m.pid, "supervisor_restart")
	if !s.shuttingDown {
		s.spawn(w, health.ActorMonitor, false)
	}
}
