package supervisor

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// adopt takes over what Redis says about a component whose slot this host
// has just claimed (docs/design.md §4.6, §11) and starts it if it should run.
// Restarts made here are not counted. claimedAt is when the claim that took
// the slot's lease was sent (real time).
func (s *Supervisor) adopt(id health.ComponentID, rec health.Component, claimedAt time.Time) {
	w := &worker{id: id, pool: s.pool(id.Queue), rec: rec, state: stIdle, heldAt: claimedAt, heldSince: claimedAt}
	w.rec.ID = id
	s.workers[id] = w
	t, _ := s.begin(w, evAdopt)
	ours := rec.Host == "" || rec.Host == s.cfg.Host
	switch rec.Status {
	case health.StatusNone:
		w.rec = health.Component{ID: id, Restarts: rec.Restarts}
		if pid := s.earlier[id]; ownedProcessAlive(pid, id) {
			// Redis lost the record of this host's earlier instance's
			// process, which still runs here: wait for it, or the slot
			// runs twice (TestRestartedHostAfterADataLossStopsItsOrphans).
			s.afterOld(t, pid, false)
			return
		}
		_ = s.spawn(t, health.ActorMonitor, false)
	case health.StatusFailed:
		s.logw(w).Warn("worker is failed: not started (reset it to start it)", "reason", rec.Restarts.FailureReason)
	case health.StatusStopped:
		if rec.Held {
			s.logw(w).Info("worker is held stopped: not started")
			return
		}
		_ = s.spawn(t, health.ActorMonitor, false)
	case health.StatusCrashed:
		if !ours {
			_ = s.spawn(t, health.ActorMonitor, false)
			return
		}
		s.afterOld(t, rec.PID, false)
	case health.StatusStarting, health.StatusHealthy, health.StatusRecovering, health.StatusStopping:
		if !ours {
			// Its host is gone (its lease expired): start it here. Its
			// tasks come back through asynq's lease recovery.
			s.logw(w).Info("taking over slot from a lost host", "from", rec.Host)
			if s.foreignWorkerAlive(rec) {
				// Its process still runs on this machine: stop it first.
				w.rec.Status, w.rec.Reason = health.StatusCrashed, "host "+rec.Host+" lost: stopping its process"
				_ = s.write(w, health.Write{Actor: health.ActorTakeover, NoCheck: true})
				s.afterOld(t, rec.PID, true)
				return
			}
			if rec.PID <= 0 && rec.Status == health.StatusStarting {
				// It learns the slot is another's at its next renewal, a
				// third of a lease at most, and kills the process within
				// stop_timeout.
				s.afterInFlight(t, "host "+rec.Host+" lost while starting a process whose pid it never recorded",
					rec.Host, s.cfg.Lease/3+s.cfg.StopTimeout+staleMargin)
				return
			}
			_ = s.spawn(t, health.ActorTakeover, false)
			return
		}
		if rec.PID <= 0 && rec.Status == health.StatusStarting && rec.Instance != "" && rec.Instance != s.cfg.Instance {
			// This host's earlier instance was starting a process and
			// died before it recorded the pid: that process runs on this
			// machine until its parent-death stop ends it, and starting
			// at once would run the slot twice. Found, it is waited for
			// as one whose pid was recorded; not found (or not yet
			// exec'd), it is given stop_timeout to go
			// (TestRestartedHostOverItsOwnStartInFlight,
			// TestRestartedHostFindsItsOwnStartInFlight).
			if pid := s.spawnedBy(id, rec.Instance); pid > 0 {
				rec.PID = pid
			} else {
				s.afterInFlight(t, "this host's earlier instance "+rec.Instance+" died while starting a process whose pid it never recorded",
					rec.Host, s.cfg.StopTimeout+staleMargin)
				return
			}
		}
		to := health.StatusCrashed
		if rec.Status == health.StatusStopping {
			to = health.StatusStopped
		}
		w.rec.Status, w.rec.Reason = to, "supervisor restart"
		_ = s.write(w, health.Write{Actor: health.ActorMonitor, NoCheck: true})
		s.afterOld(t, rec.PID, false)
	}
}

// afterOld starts t's worker once the process pid of an earlier supervisor
// is gone (its parent-death signal ends it; it gets VIGIL_SHUTDOWN_TIMEOUT
// to finish, plus a second, then its group is killed) and its tasks
// requeued. Until then it waits (waitingOld): starting it sooner would run
// the slot twice (TestStartupReconcile). term: the process is another
// host's (see foreignWorkerAlive): its group gets SIGTERM now, as no
// parent-death signal may ever reach it.
//
// A worker frozen (SIGSTOP) when its supervisor died keeps that signal
// pending. Adopted by init, its process group is orphaned and the kernel
// sends it SIGHUP and SIGCONT: it dies. Adopted by a subreaper of its own
// session (a supervisor embedded in a bigger program, the fault explorer)
// it is not, and nothing it runs can help: only SIGKILL ends a stopped
// process. Whoever's it is (this host's earlier instance:
// TestRestartedHostKillsItsFrozenOrphanAtOnce; or a lost host's on this
// machine: TestFrozenOrphanDiesWhenAnotherHostTakesItsSlot), a stopped
// process does no work and is going anyway: it gets SIGKILL at once, and
// so does one frozen while it is waited for (checked every poll). Waiting
// stop_timeout for it would let it outlive its supervisor by more than
// the stop_timeout + 1 s a worker may, once anything (a Redis stall)
// delayed the adopt.
// On another machine nothing reaches it; it does nothing while frozen
// (no job taken or finished) and dies once thawed.
func (s *Supervisor) afterOld(t step, pid int, term bool) {
	w := t.w
	if !ownedProcessAlive(pid, w.id) {
		s.recoverTasks(w, pid, "supervisor_restart", false)
		s.spawnOver(t, pid)
		return
	}
	t.to(stWaitingOld)
	w.oldPID = pid
	// Its parent, read before any signal: it may be gone (a zombie) by
	// the first poll.
	parent, buf := 0, make([]byte, 1024)
	if p, ok := readStat(pid, buf); ok {
		parent = p.ppid
	}
	switch {
	case processStopped(pid):
		s.logw(w).Warn("the previous supervisor's worker is frozen: killing it", "pid", pid)
		_ = signalGroup(pid, sigKill)
	case term:
		// Another host's: no parent-death signal may ever reach it.
		if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
			s.logw(w).Error("stop the lost host's process", "pid", pid, "err", err)
		}
	}
	s.logw(w).Info("waiting for the previous supervisor's worker to exit", "pid", pid, "lost_host", term)
	deadline := s.cfg.StopTimeout // = VIGIL_SHUTDOWN_TIMEOUT + 1s
	id := w.id
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		start := time.Now()
		for ownedProcessAlive(pid, id) {
			if p, ok := readStat(pid, buf); ok {
				parent = p.ppid
			}
			if time.Since(start) > deadline || processStopped(pid) {
				_ = signalGroup(pid, sigKill)
			}
			select {
			case <-s.dead:
				return
			case <-time.After(20 * time.Millisecond): // polling another process's /proc entry
			}
		}
		if term && parentLives(parent) {
			// The lost host's supervisor still runs here: it reaps the
			// process, and only it knows how it ended. Its own recovery
			// counts a crash against the tasks if the process died of
			// them (a crash job that brought it down on its way out);
			// this host's, which cannot tell, counts none. Both are
			// idempotent and the first takes the tasks: that host is
			// given an op_timeout to be first, or this host's recovery
			// can come a few ms before the parent's and a crash job runs
			// once more than job_crash_retries allows
			// (TestLostHostsOwnRecoveryCountsItsWorkersCrash). A parent
			// cut from Redis defers its recovery; this host's then puts
			// the tasks back, uncounted.
			select {
			case <-s.dead:
				return
			case <-time.After(s.cfg.OpTimeout):
			}
		}
		select {
		case s.gone <- goneMsg{id: id, pid: pid}:
		case <-s.dead:
		}
	}()
}

// afterInFlight starts t's worker, taken over while a start was in
// flight (its record says starting and names no pid), only once the
// process that start made has had the time, delay, to be stopped by its
// own host: never two live processes for one slot
// (TestTakeoverWaitsForAStartInFlight). Such a record is a spawn in
// flight: its host writes it, then starts the process, then records its
// pid. Its lease was gone in between; the process it started may run, and
// no pid says where (on another machine nothing could): a taker that
// started its own worker at once would run beside it. That host learns
// the slot is another's at its pid write (refused, as its lease is ours)
// or at its next renewal, and SIGKILLs the process within stop_timeout.
//
// The worker waits in waiting_start, not in backoff: an operator restart
// or reset of a worker in backoff would start it at once, and a release or
// a shutdown would let it go and write the record stopped, which the next
// holder would start at once (TestOperatorActionDuringTheWaitForAStartInFlight,
// TestShutdownDuringTheWaitForAStartInFlight). In waiting_start the table
// refuses the operator's actions, and nothing is written for the slot: the
// record still says a start is in flight, so a release, a shutdown (which
// ends the wait: Stop stays bounded) or a loss of Redis's data (the record
// is written back as it was) leaves the wait to whoever holds the slot
// next.
func (s *Supervisor) afterInFlight(t step, why, from string, delay time.Duration) {
	w := t.w
	t.to(stWaitingStart)
	s.logw(w).Warn(why+": waiting for it to stop that process", "from", from, "start_in", delay)
	s.arm(w, timerStartGone, delay)
}

// onStartGone starts t's worker (waiting_start) once the start in flight
// had the time to be stopped: the record is written crashed over it, then
// the worker started (a takeover's start, not a crash's).
func (s *Supervisor) onStartGone(t step) {
	w := t.w
	from := w.rec.Host
	w.rec.Status, w.rec.Reason = health.StatusCrashed, "host "+from+" was starting a process when it lost the slot: given the time to stop it"
	if err := s.write(w, health.Write{Actor: health.ActorTakeover, NoCheck: true}); err != nil {
		return // the slot is another's: fenced once this event is handled
	}
	// Not renewed for a lease while it waited: the lease may have lapsed
	// and the slot be another host's. No start until a renewal, as for
	// any start (TestRestartDuringAnOutageLongerThanTheLease).
	if s.startUnsafe(w) {
		s.holdStart(t)
		return
	}
	err := s.spawn(t, health.ActorTakeover, false)
	if err != nil && !s.keepOperatorState(t, err) && w.state == stWaitingStart {
		t.to(stIdle)
	}
}

// spawnedBy finds, on this machine, the worker process of slot id that
// instance started: a process group leader that is a worker of id, of this
// cluster and of a spawn of that instance (workerOf); 0 if none.
func (s *Supervisor) spawnedBy(id health.ComponentID, instance string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid && s.workerOf(pid, id, instance) {
			return pid
		}
	}
	return 0
}

// parentLives reports whether pid, the last parent seen of a process now
// gone, still runs and is neither init nor this process: the process's own
// supervisor (a reparented orphan's parent is init or a subreaper, which
// costs only the wait).
func parentLives(pid int) bool {
	if pid <= 1 || pid == os.Getpid() {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

// foreignWorkerAlive reports whether rec's process, of another host, runs
// on this machine (workerOf its slot and, when the record has one, its
// instance: a pid reused by anything else is not taken for it).
func (s *Supervisor) foreignWorkerAlive(rec health.Component) bool {
	return rec.PID > 0 && s.workerOf(rec.PID, rec.ID, rec.Instance)
}

// workerOf reports whether pid is alive here and its environment names
// slot id, this cluster's key prefix and, unless instance is "", a spawn
// of that instance.
func (s *Supervisor) workerOf(pid int, id health.ComponentID, instance string) bool {
	if !ownedProcessAlive(pid, id) {
		return false
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	// Not the Redis URL: hosts of one cluster on one machine may reach
	// Redis by different addresses (the explorer's hosts each through a
	// proxy of its own), and the pid comes from this cluster's record.
	vars := "\x00" + string(env)
	if !strings.Contains(vars, "\x00"+health.EnvPrefix+"="+s.store.Keys().Prefix+"\x00") {
		return false
	}
	return instance == "" || strings.Contains(vars, "\x00"+health.EnvSpawn+"="+instance+".")
}

func (s *Supervisor) onGone(m goneMsg) {
	w := s.workers[m.id]
	if w == nil || w.state != stWaitingOld || w.oldPID != m.pid {
		return // forgotten (fenced, released) meanwhile
	}
	t, ok := s.begin(w, evOldGone)
	if !ok {
		return
	}
	w.oldPID = 0
	s.recoverTasks(w, m.pid, "supervisor_restart", false)
	if s.shuttingDown {
		t.to(stIdle)
		return
	}
	// Not renewed for a lease while it waited (Redis away, or this host
	// too slow to renew): the lease may have lapsed and the slot be
	// another host's, which starts it too. No start until a renewal, as for
	// any start (TestOldProcessGoneDuringAnOutageLongerThanTheLease).
	if s.startUnsafe(w) {
		s.holdStart(t)
		return
	}
	s.spawnOver(t, m.pid)
}

// spawnOver starts t's worker once the earlier process pid is gone. The
// slot's record may still name that process: Redis lost the record while
// the process was waited for, and its next heartbeat re-created it,
// healthy (a heartbeat re-creates a record that is gone). Should the
// spawn's write be refused over it (healthy → starting), the worker must
// not stay waiting for a process that is gone: the slot would never run
// again and a Stop would never return
// (TestRecordRecreatedByTheOldProcessWhileWaitedFor). The slot is this
// host's (every write checks the lease) and the process named is gone:
// the record is written crashed over it, and the worker started.
func (s *Supervisor) spawnOver(t step, pid int) {
	w := t.w
	err := s.spawn(t, health.ActorMonitor, false)
	var te *health.TransitionError
	if s.keepOperatorState(t, err) {
		return
	}
	if errors.As(err, &te) {
		s.logw(w).Warn("the slot's record names a process that is gone: writing over it", "status", te.From, "pid", pid)
		w.rec.Status, w.rec.Reason = health.StatusCrashed, "the record of a process that is gone"
		if err = s.write(w, health.Write{Actor: health.ActorMonitor, NoCheck: true}); err == nil {
			err = s.spawn(t, health.ActorMonitor, false)
		}
	}
	if err != nil && w.state == stWaitingOld {
		t.to(stIdle) // never waiting for nothing: a Stop waits for no idle worker
	}
}

// keepOperatorState answers a monitor's start refused by a record stopped
// and held, or failed: states only an operator's action ends. The record
// is another host's, written while this host's lease had lapsed (it took
// it again since, its view older than the record's): the worker takes the
// record's state and stays idle until an operator restarts or resets it.
// It reports whether err was such a refusal.
func (s *Supervisor) keepOperatorState(t step, err error) bool {
	var te *health.TransitionError
	if !errors.As(err, &te) || !te.Held && te.From != health.StatusFailed {
		return false
	}
	w := t.w
	s.logw(w).Warn("not started: the slot's record is held stopped or failed (written while this host's lease had lapsed)",
		"status", te.From, "held", te.Held)
	w.rec.Status, w.rec.Held = te.From, te.Held
	t.to(stIdle)
	return true
}
