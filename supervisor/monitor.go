package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

type timerKind int

const (
	timerCheck   timerKind = iota // heartbeat deadline / start timeout
	timerRestart                  // backoff elapsed
	timerKill                     // stop_timeout elapsed: SIGKILL
	numTimers
)

type exitMsg struct {
	id    health.ComponentID
	at    time.Time // when Wait returned
	pid   int
	state *os.ProcessState
	err   error
}

type timerMsg struct {
	id   health.ComponentID
	kind timerKind
	seq  uint64
}

type goneMsg struct {
	id  health.ComponentID
	pid int
}

type timerRef struct {
	stop func() bool
	seq  uint64
}

// stopReq is a stop in flight.
type stopReq struct {
	reason string
	held   bool
	killed bool     // SIGKILL after stop_timeout
	then   []func() // run once the process has exited and stopped is written
}

// worker is the monitor's view of one component.
type worker struct {
	id   health.ComponentID
	pool *Pool
	rec  health.Component // what this host holds true, written to Redis
	proc *process
	kill struct {
		code          int
		reason, cause string
	} // set when the monitor killed it
	stop    *stopReq
	sawBeat bool
	expires time.Time // when the last heartbeat seen expires (crash-detection latency)
	dirty   bool      // rec not yet written (Redis unreachable)
	recover []int     // pids whose running tasks still need requeueing
	waiting bool      // reconcile: waiting for an old pid to go
	// releasing: being stopped to give the slot to another host; fenced:
	// the slot's lease was lost, the process is being killed.
	releasing, fenced bool
	timers            [numTimers]timerRef
}

// monitor is the one goroutine that owns the workers.
func (s *Supervisor) monitor() {
	defer close(s.dead)
	for {
		select {
		case fn := <-s.cmds:
			fn()
		case m := <-s.exits:
			s.onExit(m)
		case m := <-s.timers:
			s.onTimer(m)
		case m := <-s.gone:
			s.onGone(m)
		case <-s.up:
			s.onRedisUp()
		case <-s.ticks:
			s.tick(false)
		case <-s.quit:
			s.cancelAllTimers()
			if s.cluster.tick != nil {
				s.cluster.tick()
			}
			return
		}
		s.checkDrained()
	}
}

func (s *Supervisor) logw(w *worker) *slog.Logger {
	return s.log.With(slog.String("component", w.id.String()))
}

// arm (re)schedules w's timer of kind after d; any earlier one is cancelled,
// so there is never more than one timer of a kind per component.
func (s *Supervisor) arm(w *worker, kind timerKind, d time.Duration) {
	s.disarm(w, kind)
	s.seq++
	msg := timerMsg{id: w.id, kind: kind, seq: s.seq}
	t := s.cfg.Clock.AfterFunc(d, func() {
		select {
		case s.timers <- msg:
		case <-s.dead:
		}
	})
	w.timers[kind] = timerRef{stop: t.Stop, seq: s.seq}
}

// ids lists the components this host holds, sorted.
func (s *Supervisor) ids() []health.ComponentID {
	ids := make([]health.ComponentID, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	health.SortIDs(ids)
	return ids
}

func (s *Supervisor) disarm(w *worker, kind timerKind) {
	if t := w.timers[kind]; t.stop != nil {
		t.stop()
	}
	w.timers[kind] = timerRef{}
}

func (s *Supervisor) cancelAllTimers() {
	for _, w := range s.workers {
		for k := range numTimers {
			s.disarm(w, k)
		}
	}
}

func (s *Supervisor) onTimer(m timerMsg) {
	w := s.workers[m.id]
	if w == nil || w.timers[m.kind].seq != m.seq {
		return // cancelled or replaced
	}
	w.timers[m.kind] = timerRef{}
	switch m.kind {
	case timerCheck:
		s.check(w)
	case timerRestart:
		if w.rec.Status == health.StatusCrashed && w.proc == nil && !s.shuttingDown {
			s.cfg.Metrics.Restart(w.id.Queue, "backoff")
			s.spawn(w, health.ActorMonitor, false)
		}
	case timerKill:
		if w.proc != nil && w.fenced {
			_ = signalGroup(w.proc.pid, sigKill)
		} else if w.proc != nil && w.stop != nil {
			w.stop.killed = true
			s.logw(w).Warn("stop timeout: killing", "pid", w.proc.pid, "stop_timeout", s.cfg.StopTimeout)
			_ = signalGroup(w.proc.pid, sigKill)
		}
	}
}

// opCtx bounds one Redis call of the monitor.
func (s *Supervisor) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.OpTimeout)
}

// write stores w.rec (see health.Store.Write). While Redis is unreachable it
// only marks w dirty: the record is written back when Redis returns. A
// refused transition is returned; Redis errors are not (they are an outage).
func (s *Supervisor) write(w *worker, wr health.Write) error {
	w.rec.UpdatedAt = s.cfg.Clock.Now()
	if s.redisDown {
		w.dirty = true
		return nil
	}
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
	}
	w.dirty = true
	s.redisFailed(err)
	return nil
}

// spawn starts w's process. counted tells whether this start follows a
// counted crash (the history was written with the crash already).
func (s *Supervisor) spawn(w *worker, actor health.Actor, writeRestarts bool) error {
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
	w.sawBeat, w.kill.code, w.kill.reason, w.stop, w.expires = false, 0, "", nil, time.Time{}
	switch actor {
	case health.ActorOperator:
		s.cfg.Metrics.Restart(w.id.Queue, "operator")
	case health.ActorTakeover:
		s.cfg.Metrics.Restart(w.id.Queue, "takeover")
	}
	proc, err := s.startProcess(w.pool, w.id)
	if err != nil {
		s.logw(w).Error("spawn failed", "err", err)
		s.crashed(w, 0, health.ExitUnknown, "", "spawn failed: "+err.Error(), "spawn")
		return nil
	}
	w.proc = proc
	r.PID = proc.pid
	s.logw(w).Info("worker started", "pid", proc.pid, "restart_count", r.Restarts.RestartCount)
	if !s.redisDown {
		ctx, cancel := s.opCtx()
		err := s.store.SetPID(ctx, w.rec)
		cancel()
		if err != nil {
			w.dirty = true
			s.redisFailed(err)
		}
	}
	s.arm(w, timerCheck, min(s.cfg.Heartbeat.TTL, s.cfg.Heartbeat.StartTimeout))
	return nil
}

// check is a heartbeat deadline: read the key (which expires it on the
// spot if due) and judge, or re-arm for its new expiry.
func (s *Supervisor) check(w *worker) {
	if w.proc == nil || w.stop != nil || s.redisDown {
		return // judged again after Redis returns (with a TTL of grace)
	}
	ctx, cancel := s.opCtx()
	probes, err := s.store.ProbeMany(ctx, []health.ComponentID{w.id})
	cancel()
	if err != nil {
		s.redisFailed(err)
		return
	}
	p, now := probes[0], s.cfg.Clock.Now()
	hb := s.cfg.Heartbeat
	switch {
	case p.Value != "" && !health.ValidHeartbeat(p.Value):
		s.killFor(w, health.ExitBadHeartbeat, "bad_heartbeat", "invalid heartbeat "+quoteShort(p.Value))
	case p.TTL > 0:
		w.sawBeat, w.expires = true, now.Add(p.TTL)
		if p.Status == health.StatusHealthy && w.rec.Status == health.StatusStarting {
			w.rec.Status, w.rec.HealthySince = health.StatusHealthy, p.HealthySince
		}
		s.arm(w, timerCheck, p.TTL+time.Millisecond)
	case w.sawBeat || p.Status == health.StatusHealthy:
		s.killFor(w, health.ExitHeartbeatTimeout, "hang", "heartbeat expired")
	default:
		left := hb.StartTimeout - now.Sub(w.proc.started)
		if left <= 0 {
			s.killFor(w, health.ExitHeartbeatTimeout, "start_timeout", "no heartbeat within start_timeout")
			return
		}
		s.arm(w, timerCheck, min(hb.Interval, left))
	}
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
	w.kill.code, w.kill.reason, w.kill.cause = code, reason, cause
	s.logw(w).Warn("killing worker", "pid", w.proc.pid, "reason", reason, "exit_code", code)
	if err := signalGroup(w.proc.pid, sigKill); err != nil {
		s.logw(w).Error("kill", "err", err)
	}
}

func (s *Supervisor) onExit(m exitMsg) {
	w := s.workers[m.id]
	if w == nil || w.proc == nil || w.proc.pid != m.pid {
		return
	}
	code, sig := health.ExitCodeOf(m.state)
	pid := w.proc.pid
	w.proc = nil
	s.disarm(w, timerCheck)
	s.disarm(w, timerKill)
	if w.fenced {
		s.logw(w).Info("fenced worker exited", "pid", pid)
		s.recoverTasks(w, pid, "fenced")
		s.forget(w, false)
		return
	}
	reason := exitReason(code, sig)
	cause := "exit"
	if sig != "" {
		cause = "signal"
	}
	if w.kill.code != 0 {
		code, sig, reason, cause = w.kill.code, "", w.kill.reason, w.kill.cause
	}
	if st := w.stop; st != nil {
		w.stop = nil
		r := &w.rec
		r.Status, r.Held, r.Reason = health.StatusStopped, st.held, st.reason
		r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
		if st.killed {
			r.Reason = "stop timeout"
		}
		// A worker requeues what it could not finish before exiting 0; one
		// killed or failing on the way out may not have: put back what it
		// still held (only tasks still active under this pid are touched).
		if st.killed || code != 0 {
			s.recoverTasks(w, pid, "stopped")
		}
		_ = s.write(w, health.Write{Actor: health.ActorMonitor})
		s.logw(w).Info("worker stopped", "pid", pid, "exit_code", code, "reason", r.Reason)
		for _, f := range st.then {
			f()
		}
		return
	}
	s.crashed(w, pid, code, sig, reason, cause)
	// How long the death took to be recorded: from the exit (cmd.Wait
	// returned), or, for a hang, from the moment the heartbeat expired.
	switch {
	case cause == "hang" && !w.expires.IsZero():
		s.cfg.Metrics.Detected("hang", s.cfg.Clock.Now().Sub(w.expires))
	case w.kill.code == 0 && !m.at.IsZero():
		s.cfg.Metrics.Detected("exit", s.cfg.Clock.Now().Sub(m.at))
	}
}

func exitReason(code int, sig string) string {
	if sig != "" {
		return "killed by " + sig
	}
	return "exited with code " + itoa(code)
}

// crashed records a counted crash and applies the policy: a restart timer,
// or failed.
// cause labels the crash metric (see metrics.Metrics.Crash).
func (s *Supervisor) crashed(w *worker, pid, code int, sig, reason, cause string) {
	s.cfg.Metrics.Crash(w.id.Queue, cause, code)
	now := s.cfg.Clock.Now()
	var healthySince time.Time
	if w.rec.Status == health.StatusHealthy {
		healthySince = w.rec.HealthySince
	}
	d := s.cfg.Policy.Decide(w.rec.Restarts, policy.Crash{At: now, HealthySince: healthySince}, s.cfg.Rand())
	r := &w.rec
	r.Status, r.Reason, r.Restarts = health.StatusCrashed, reason, d.State
	r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
	_ = s.write(w, health.Write{Actor: health.ActorMonitor, Restarts: true})
	if pid > 0 {
		s.recoverTasks(w, pid, "crash")
	}
	if d.Failed {
		r.Status, r.Reason = health.StatusFailed, d.State.FailureReason
		_ = s.write(w, health.Write{Actor: health.ActorMonitor})
		s.logw(w).Error("worker failed", "exit_code", code, "reason", reason, "failure", d.State.FailureReason,
			"lifetime_restarts", d.State.LifetimeRestarts)
		s.cfg.Metrics.Failed(w.id.Queue)
		s.alert("worker_failed", health.WorkerEvent(w.rec, w.rec.UpdatedAt))
		return
	}
	s.logw(w).Warn("worker crashed", "pid", pid, "exit_code", code, "reason", reason,
		"restart_in", d.Delay, "restart_count", d.State.RestartCount, "lifetime_restarts", d.State.LifetimeRestarts)
	if !s.shuttingDown {
		s.arm(w, timerRestart, d.Delay)
	}
}

// alert tells the configured Alerter, if any; it never blocks.
func (s *Supervisor) alert(kind string, ev health.Event) {
	if s.cfg.Alerts != nil {
		s.cfg.Alerts.Notify(kind, ev)
	}
}

// recoverTasks puts back the tasks of w's reaped process pid.
// reason labels the metric: crash, stopped, fenced, supervisor_restart or
// deferred (Redis was away when the process died).
func (s *Supervisor) recoverTasks(w *worker, pid int, reason string) {
	if s.cfg.Recoverer == nil {
		return
	}
	if s.redisDown {
		w.recover = append(w.recover, pid)
		return
	}
	ctx, cancel := s.opCtx()
	n, err := s.cfg.Recoverer.Recover(ctx, w.id, pid)
	cancel()
	if err != nil {
		w.recover = append(w.recover, pid)
		s.redisFailed(err)
		return
	}
	if n > 0 {
		s.cfg.Metrics.Recovered(w.id.Queue, reason, n)
		s.logw(w).Info("requeued running tasks", "pid", pid, "tasks", n)
	}
}

// stopWorker stops w gracefully: SIGTERM, SIGKILL after stop_timeout. then
// runs once stopped is written.
func (s *Supervisor) stopWorker(w *worker, reason string, held bool, then func()) {
	addThen := func(st *stopReq) {
		if then != nil {
			st.then = append(st.then, then)
		}
	}
	switch {
	case w.proc != nil && w.stop != nil:
		w.stop.held = w.stop.held || held
		addThen(w.stop)
	case w.proc != nil:
		w.stop = &stopReq{reason: reason, held: held}
		addThen(w.stop)
		w.rec.Status = health.StatusStopping
		_ = s.write(w, health.Write{Actor: health.ActorMonitor})
		s.disarm(w, timerCheck)
		if err := signalGroup(w.proc.pid, sigTerm); err != nil {
			s.logw(w).Error("stop", "err", err)
		}
		s.arm(w, timerKill, s.cfg.StopTimeout)
	default:
		s.disarm(w, timerRestart)
		if w.rec.Status == health.StatusCrashed || (held && !w.rec.Held && w.rec.Status == health.StatusStopped) {
			actor := health.ActorMonitor
			if held {
				actor = health.ActorOperator
			}
			w.rec.Status, w.rec.Held, w.rec.Reason = health.StatusStopped, held, reason
			_ = s.write(w, health.Write{Actor: actor})
		}
		if then != nil {
			then()
		}
	}
}

// shutdown stops every running worker in parallel (host shutdown).
func (s *Supervisor) shutdown() {
	s.shuttingDown = true
	for _, id := range s.ids() {
		w := s.workers[id]
		if w.proc != nil || w.rec.Status == health.StatusCrashed {
			s.stopWorker(w, "host shutdown", false, nil)
		}
	}
}

func (s *Supervisor) checkDrained() {
	if !s.shuttingDown {
		return
	}
	for _, w := range s.workers {
		if w.proc != nil || w.waiting {
			return
		}
	}
	select {
	case <-s.drained:
	default:
		close(s.drained)
	}
}
