package supervisor

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

func (s *Supervisor) onExit(m exitMsg) {
	w := s.workers[m.id]
	if w == nil || w.proc == nil || w.proc.pid != m.pid {
		return
	}
	if late := time.Since(m.waited); !m.waited.IsZero() && late > exitLate {
		s.logw(w).Warn("worker exit handled late: the monitor was busy", "pid", m.pid, "late", late.Round(time.Millisecond))
	}
	t, ok := s.begin(w, evExit)
	if !ok {
		return
	}
	code, sig := health.ExitCodeOf(m.state)
	pid := w.proc.pid
	w.proc = nil
	s.disarm(w, timerCheck)
	s.disarm(w, timerKill)
	switch w.state {
	case stFenced:
		s.exitFenced(t, pid, code, sig)
	case stStopping, stReleasing:
		s.exitStopped(t, pid, code, sig)
	case stRunning:
		s.exitCrashed(t, m, pid, code, sig)
	}
}

// exitFenced forgets a fenced worker whose process is gone. Its record is
// the new owner's: nothing is written; whatever waited for its stop is
// answered with ErrSlotMoving. Its tasks still marked running under its pid
// are put back (scoped to the pid, so the new owner's are untouched).
func (s *Supervisor) exitFenced(t step, pid, code int, sig string) {
	w := t.w
	s.logw(w).Info("fenced worker exited", "pid", pid)
	s.recoverTasks(w, pid, "fenced", diedOfItsTasks(w.stop, w, code, sig))
	var ls []later
	if w.stop != nil {
		ls, w.stop = w.stop.then, nil
	}
	s.forget(t, false)
	runThens(ls, ErrSlotMoving)
}

// exitStopped records the end of a stop. A released worker is then
// forgotten and its lease given up.
func (s *Supervisor) exitStopped(t step, pid, code int, sig string) {
	w := t.w
	st := w.stop
	w.stop = nil
	r := &w.rec
	r.Status, r.Held, r.Reason = health.StatusStopped, st.held, st.reason
	r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
	if st.killed {
		r.Reason = "stop timeout"
	}
	if w.kill.code != 0 {
		r.ExitCode, r.Signal = w.kill.code, ""
	}
	// A worker requeues what it could not finish before it exits 0, but one
	// killed, failing or lying on the way out may not have: put back what
	// it still holds, whatever its exit (TestCleanExitAfterStopRecoversTasks).
	// Recovery is idempotent and touches only tasks still active under
	// this pid.
	s.recoverTasks(w, pid, "stopped", diedOfItsTasks(st, w, code, sig))
	var thenErr error
	if err := s.write(w, health.Write{Actor: health.ActorMonitor}); errors.Is(err, health.ErrNotOwner) {
		thenErr = ErrSlotMoving
	}
	s.logw(w).Info("worker stopped", "pid", pid, "exit_code", code, "reason", r.Reason)
	if t.from == stReleasing {
		s.forget(t, true)
	} else {
		t.to(stIdle)
	}
	runThens(st.then, thenErr)
}

// exitCrashed handles an exit nobody asked for.
func (s *Supervisor) exitCrashed(t step, m exitMsg, pid, code int, sig string) {
	w := t.w
	reason := exitReason(code, sig)
	cause := "exit"
	if sig != "" {
		cause = "signal"
	}
	if w.kill.code != 0 {
		code, sig, reason, cause = w.kill.code, "", w.kill.reason, w.kill.cause
	} else if other, ok := s.recordNamesAnother(w, pid); ok {
		s.exitStale(t, pid, code, sig, reason, "stale: the record named "+other)
		return
	} else if why, ok := s.holdBroken(w); ok {
		s.exitStale(t, pid, code, sig, reason, why)
		return
	} else if s.redis.down() {
		e := exitSeen{pid: pid, code: code, sig: sig, reason: reason, cause: cause, at: s.cfg.Clock.Now()}
		if w.rec.Status == health.StatusHealthy {
			e.healthySince = w.rec.HealthySince
		}
		s.exitUnjudged(t, e)
		return
	}
	s.crashed(t, pid, code, sig, reason, cause)
	// How long the death took to be recorded: from the exit (cmd.Wait
	// returned), or, for a hang, from the moment the heartbeat expired.
	switch {
	case cause == "hang" && !w.expires.IsZero():
		s.cfg.Metrics.Detected("hang", s.cfg.Clock.Now().Sub(w.expires))
	case w.kill.code == 0 && !m.at.IsZero():
		s.cfg.Metrics.Detected("exit", s.cfg.Clock.Now().Sub(m.at))
	}
}

// recordNamesAnother reports whether the record of w's slot names a running
// process other than pid, the one of w that exited, and which: a worker
// that finds its record another's exits as stale.
func (s *Supervisor) recordNamesAnother(w *worker, pid int) (string, bool) {
	if s.redis.down() {
		return "", false
	}
	ctx, cancel := s.opCtx()
	ps, err := s.store.ProbeMany(ctx, []health.ComponentID{w.id})
	cancel()
	if err != nil {
		s.redisFailed(err)
		return "", false
	}
	p := ps[0]
	if !p.Status.Running() || (p.PID == 0 || p.PID == pid) && (p.Instance == "" || p.Instance == s.cfg.Instance) {
		return "", false
	}
	return "pid " + strconv.Itoa(p.PID) + " of instance " + quoteShort(p.Instance), true
}

// exitStale handles an exit that is not counted because this host may not
// have held the slot alone while the process ran: the record names another
// process (after a data loss, another host's worker re-created the record
// by its heartbeat while this host took the vanished lease back, and this
// host's worker, seeing itself stale, exited:
// TestStaleExitIsNotACrash), or this host's hold on the lease broke since
// the process started (holdBroken: TestExitAfterTheLeaseBrokeIsNotCounted).
// why says which. No crash is counted. If the lease is another's, the
// write is refused and the worker fenced; if it is this host's, the other
// host fences its process at its next renewal (a third of a lease) and
// SIGKILLs it within stop_timeout: the worker starts again after both
// (never two processes for one slot), and not before this host has
// renewed the lease (see onTimer).
func (s *Supervisor) exitStale(t step, pid, code int, sig, reason, why string) {
	w := t.w
	r := &w.rec
	r.Status, r.Reason = health.StatusCrashed, reason+" ("+why+"; not counted)"
	r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
	_ = s.write(w, health.Write{Actor: health.ActorMonitor, NoCheck: t.verdict != nil})
	// Not a crash of the worker's; its tasks' crash is its own question:
	// only a violent exit (a crash job's) counts against them.
	s.recoverTasks(w, pid, "fenced", violentExit(code, sig))
	delay := s.cfg.Lease/3 + s.cfg.StopTimeout + staleMargin
	s.logw(w).Warn("worker exited while this host may not have held its slot alone; not counted", "pid", pid,
		"exit_code", code, "why", why, "restart_in", delay)
	s.scheduleRestart(t, delay)
}

// exitUnjudged handles an exit nobody asked for, seen while Redis is away
// and this host's hold on the slot's lease not known broken. It may be a
// crash, or another host's takeover: Redis may have lost the lease (an
// empty restart) and another host taken the slot and stopped this
// machine's process, which this host cannot see until Redis answers: only
// real crashes count (TestExitAfterTheLeaseBrokeIsNotCounted,
// TestRedisOutageCrashCounted). Nothing is counted yet:
// the record says crashed, the tasks are put back (once Redis answers), and
// the worker waits in backoff. Its restart timer judges the exit once Redis
// answers and the lease is renewed (judgeExit); a fence, a release or a
// shutdown before that drops it uncounted.
func (s *Supervisor) exitUnjudged(t step, e exitSeen) {
	w := t.w
	r := &w.rec
	r.Status, r.Reason = health.StatusCrashed, e.reason+" (Redis away: counted once this host's lease is found unbroken)"
	r.PID, r.HasExit, r.ExitCode, r.Signal = e.pid, true, e.code, e.sig
	_ = s.write(w, health.Write{Actor: health.ActorMonitor})
	if e.pid > 0 {
		// Put back once Redis answers, before the verdict; a crash
		// counted against the tasks only if the exit was violent (a
		// takeover's SIGTERM ends a worker cleanly: see violentExit).
		s.recoverPID(deadPID{id: w.id, pid: e.pid, crashed: violentExit(e.code, e.sig)}, "crash")
	}
	s.logw(w).Warn("worker exited while Redis is away; counted once this host's lease is found unbroken", "pid", e.pid,
		"exit_code", e.code, "reason", e.reason)
	w.unjudged = &e
	s.scheduleRestart(t, s.cfg.Lease/3)
}

// judgeExit gives the verdict on w's unjudged exit, now that Redis answers
// and the lease has been renewed since: a crash, counted (its backoff
// starts now, or the worker fails), unless this host's hold on the lease
// broke since the process started. Its tasks were put back already (a
// second recovery finds nothing).
func (s *Supervisor) judgeExit(t step) {
	w := t.w
	e := *w.unjudged
	t.verdict = &e
	why, broken := s.holdBroken(w)
	switch {
	case broken:
		w.unjudged = nil
		s.exitStale(t, e.pid, e.code, e.sig, e.reason, why)
	case s.redis.down():
		s.holdStart(t) // the lease holder could not be read: judged later
	default:
		w.unjudged = nil
		s.crashed(t, e.pid, e.code, e.sig, e.reason, e.cause)
	}
}

// holdBroken reports whether this host's hold on w's slot lease may have
// broken since w's process started, and how. Another host can take the
// slot only once the lease is gone (it lapsed while this host could not
// renew it, or Redis lost it), and its takeover stops the process it finds
// on this machine (SIGTERM, then SIGKILL): an exit then is not a crash,
// however clean or violent (TestExitAfterTheLeaseBrokeIsNotCounted,
// TestLostRenewalAfterALapseCountsNoCrash). It broke if the lease was found
// gone and taken again since the process started, if this host has not
// renewed it for a lease (it may have lapsed: Redis is away or slow; a
// cut-off host cannot tell), or if it is not this host's now.
func (s *Supervisor) holdBroken(w *worker) (string, bool) {
	switch {
	case w.heldSince.After(w.procSince):
		return "this host's lease on the slot was gone and taken again since the process started", true
	case time.Since(w.heldAt) >= s.cfg.Lease:
		return "this host's lease on the slot not renewed for " + time.Since(w.heldAt).Round(time.Millisecond).String() +
			": it may have lapsed and been taken", true
	case s.redis.down():
		return "", false
	}
	ctx, cancel := s.opCtx()
	hs, err := s.store.LeaseHolders(ctx, []string{s.store.Keys().Slot(w.id)})
	cancel()
	if err != nil {
		s.redisFailed(err)
		return "", false
	}
	if hs[0] != s.cluster.me {
		return "this host's lease on the slot is gone (" + quoteShort(hs[0]) + " holds it)", true
	}
	return "", false
}

// staleMargin is added to the time another host takes to fence and kill
// its process before a stale worker's slot is started again here.
const staleMargin = 250 * time.Millisecond

func exitReason(code int, sig string) string {
	if sig != "" {
		return "killed by " + sig
	}
	return "exited with code " + strconv.Itoa(code)
}

// crashed records a crash and applies the policy: a restart timer
// (backoff), or failed (idle). cause labels the crash metric (see
// metrics.Metrics.Crash).
//
// Only real crashes count. The exit of a process started while Redis was
// unreachable, and never seen beating since, is not counted: it may have
// given up for want of Redis (even just after Redis came back), and that
// must not walk its slot to failed
// (TestCrashDuringOutageDoesNotCascadeToFailed).
func (s *Supervisor) crashed(t step, pid, code int, sig, reason, cause string) {
	w := t.w
	if w.outage != 0 && !w.sawBeat {
		s.crashedUncounted(t, pid, code, sig, reason)
		return
	}
	s.cfg.Metrics.Crash(w.id.Queue, cause, code)
	now := s.cfg.Clock.Now()
	var healthySince time.Time
	if w.rec.Status == health.StatusHealthy {
		healthySince = w.rec.HealthySince
	}
	if v := t.verdict; v != nil {
		// Judged later (exitUnjudged): the crash as it was when seen.
		now, healthySince = v.at, v.healthySince
	}
	d := s.cfg.Policy.Decide(w.rec.Restarts, policy.Crash{At: now, HealthySince: healthySince}, s.cfg.Rand())
	r := &w.rec
	r.Status, r.Reason, r.Restarts = health.StatusCrashed, reason, d.State
	r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
	_ = s.write(w, health.Write{Actor: health.ActorMonitor, Restarts: true, NoCheck: t.verdict != nil})
	if pid > 0 {
		s.recoverTasks(w, pid, "crash", violentExit(code, sig))
	}
	if d.Failed {
		r.Status, r.Reason = health.StatusFailed, d.State.FailureReason
		_ = s.write(w, health.Write{Actor: health.ActorMonitor})
		s.logw(w).Error("worker failed", "exit_code", code, "reason", reason, "failure", d.State.FailureReason,
			"lifetime_restarts", d.State.LifetimeRestarts)
		s.cfg.Metrics.Failed(w.id.Queue)
		s.alert("worker_failed", health.WorkerEvent(w.rec, w.rec.UpdatedAt))
		t.to(stIdle)
		return
	}
	s.logw(w).Warn("worker crashed", "pid", pid, "exit_code", code, "reason", reason,
		"restart_in", d.Delay, "restart_count", d.State.RestartCount, "lifetime_restarts", d.State.LifetimeRestarts)
	s.scheduleRestart(t, d.Delay)
}

// crashedUncounted records a crash that is not counted: the history stays
// as it was; the restart still backs off, by the uncounted restarts since
// Redis went away.
func (s *Supervisor) crashedUncounted(t step, pid, code int, sig, reason string) {
	w := t.w
	r := &w.rec
	r.Status, r.Reason = health.StatusCrashed, reason+" (not counted: started while Redis was unreachable)"
	r.PID, r.HasExit, r.ExitCode, r.Signal = pid, true, code, sig
	_ = s.write(w, health.Write{Actor: health.ActorMonitor, NoCheck: t.verdict != nil})
	if pid > 0 {
		s.recoverTasks(w, pid, "crash", violentExit(code, sig))
	}
	delay := s.cfg.Policy.Backoff(w.uncounted, s.cfg.Rand())
	w.uncounted++
	s.logw(w).Warn("worker crashed", "pid", pid, "exit_code", code, "reason", reason, "counted", false, "restart_in", delay)
	s.scheduleRestart(t, delay)
}

// scheduleRestart arms the one restart timer (backoff), unless the host is
// shutting down (idle).
func (s *Supervisor) scheduleRestart(t step, d time.Duration) {
	if s.shuttingDown {
		t.to(stIdle)
		return
	}
	s.arm(t.w, timerRestart, d)
	t.to(stBackoff)
}

// alert tells the configured Alerter, if any; it never blocks.
func (s *Supervisor) alert(kind string, ev health.Event) {
	if s.cfg.Alerts != nil {
		s.cfg.Alerts.Notify(kind, ev)
	}
}

// recoverTasks puts back the tasks of w's reaped process pid.
// reason labels the metric: crash, stopped, fenced, supervisor_restart or
// deferred (Redis was away when the process died). A recovery Redis could
// not take is kept by the supervisor, not by w, and made once Redis
// answers again: w may be forgotten meanwhile (released or fenced), its
// process's tasks still active under its pid
// (TestReleasedDuringOutageRecoveredWhenRedisIsBack).
//
// crashed counts a crash against the tasks whose handler had begun (see
// Recoverer): the process died unasked, not by a stop this host asked
// for (TestCleanExitAfterStopRecoversTasks).
func (s *Supervisor) recoverTasks(w *worker, pid int, reason string, crashed bool) {
	s.recoverPID(deadPID{id: w.id, pid: pid, crashed: crashed}, reason)
}

// diedOfItsTasks reports whether a process this host asked to stop died
// of what it ran rather than of the stop: a violent exit (a crash job that
// crashed it on its way out, exit 3 while being released; uncounted, the
// crash job would run once more than job_crash_retries allows) that is
// not this host's own SIGKILL at stop_timeout. A clean exit, or SIGTERM's,
// is the stop's (TestViolentExitDuringAStopCountsAgainstTheTasks).
func diedOfItsTasks(st *stopReq, w *worker, code int, sig string) bool {
	if st != nil && st.killed || w.kill.code != 0 {
		return false
	}
	return violentExit(code, sig)
}

// violentExit reports whether an exit nobody here asked for was a crash of
// what the process ran: a non-zero code, or a signal other than a request
// to stop (SIGTERM, SIGINT). A worker asked to stop (another host's
// takeover stops this machine's process with SIGTERM) puts its tasks back
// and exits 0; a crash job exits 3 (the explorer's), a panic 2, a SIGKILL
// or a SIGSEGV is a signal.
func violentExit(code int, sig string) bool {
	if sig != "" {
		return sig != "SIGTERM" && sig != "SIGINT"
	}
	return code != 0
}

// recoverPID is recoverTasks by dead process.
func (s *Supervisor) recoverPID(d deadPID, reason string) {
	if s.cfg.Recoverer == nil {
		return
	}
	if s.redis.down() {
		s.recoverLater = append(s.recoverLater, d)
		return
	}
	// Recover makes several round trips (four, and a script sent again
	// after Redis lost its script cache): each has op_timeout of its own
	// within a budget, as a tick's calls. One op_timeout for them all
	// would fail on a link whose round trip takes a third of it, though
	// every call is answered in time: Redis would count as down, the
	// recovery would fail again each time Redis is found back, and the
	// dead worker's task would stay active (TestRecoveryCompletesOnASlowLink).
	calls := s.stepCalls()
	ctx, cancel := s.budgetCtx(calls.with(context.Background()), recoverBudget)
	n, err := s.cfg.Recoverer.Recover(ctx, d.id, d.pid, d.crashed)
	cancel()
	s.waited(calls)
	if err != nil {
		s.recoverLater = append(s.recoverLater, d)
		s.redisFailed(err)
		return
	}
	if n > 0 {
		s.cfg.Metrics.Recovered(d.id.Queue, reason, n)
		s.log.Info("requeued running tasks", "component", d.id.String(), "pid", d.pid, "tasks", n, "crashed", d.crashed)
	}
}

// recoverBudget is how many op_timeouts one recovery may take in all, each
// of its calls bounded by one.
const recoverBudget = 5

// deadPID is a reaped process of a component whose tasks still need
// requeueing.
type deadPID struct {
	id      health.ComponentID
	pid     int
	crashed bool // it died unasked: its tasks count a crash (see Recoverer)
}

// recoverDeferred makes the recoveries Redis could not take, while it
// answers (a failure keeps the rest for its return).
func (s *Supervisor) recoverDeferred() {
	for len(s.recoverLater) > 0 && !s.redis.down() {
		d := s.recoverLater[0]
		s.recoverLater = s.recoverLater[1:]
		s.recoverPID(d, "deferred")
	}
}
