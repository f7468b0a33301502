package supervisor_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestStartupReconcile starts a supervisor on records an earlier one of the
// same host left behind (docs/design.md §4.6): running ones whose process is gone
// are marked crashed (reason supervisor restart), stopping ones stopped,
// and all are started again without their restart counts moving; one whose
// old process still lives waits for it; failed and held ones stay down.
func TestStartupReconcile(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 7, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	id := ids("q", 7)
	now := time.Now().Add(-time.Minute)
	dead := deadPID(t)
	old := startOldWorker(t, h, id[5])
	hist := func(count, lifetime int) policy.State {
		return policy.State{RestartCount: count, LifetimeRestarts: lifetime, LastRestart: now, Crashes: []time.Time{now}}
	}
	recs := []health.Component{
		{ID: id[0], Status: health.StatusHealthy, PID: dead, StartedAt: now, HealthySince: now, Restarts: hist(2, 3)},
		{ID: id[1], Status: health.StatusFailed, PID: dead, HasExit: true, ExitCode: 1,
			Restarts: policy.State{RestartCount: 4, LifetimeRestarts: 4, FailedAt: now, FailureReason: "rapid: 5 crashes within 5m0s"}},
		{ID: id[2], Status: health.StatusStopped, Held: true, PID: dead, HasExit: true, Reason: "operator stop"},
		{ID: id[3], Status: health.StatusCrashed, PID: dead, HasExit: true, ExitCode: 1, Restarts: hist(1, 1)},
		{ID: id[4], Status: health.StatusStopping, PID: dead, StartedAt: now, Restarts: hist(1, 2)},
		{ID: id[5], Status: health.StatusHealthy, PID: old.Process.Pid, StartedAt: now, HealthySince: now},
		// id[6] has no record at all.
	}
	for _, c := range recs {
		c.Host = "h1"
		writeRecord(t, h.store, c)
	}
	ev0, ev4 := newEventReader(t, h.store), newEventReader(t, h.store)
	h.start()

	// Start returns once the records are reconciled.
	c := ev0.waitEvent(id[0], func(w health.WorkerView) bool { return w.Status != string(health.StatusHealthy) })
	if c.Status != string(health.StatusCrashed) || c.Reason != "supervisor restart" || c.PID != dead {
		t.Errorf("%s reconciled to %+v, want crashed, supervisor restart", id[0], c)
	}
	c = ev4.waitEvent(id[4], func(w health.WorkerView) bool { return w.Status != string(health.StatusStopping) })
	if c.Status != string(health.StatusStopped) || c.Reason != "supervisor restart" {
		t.Errorf("%s reconciled to %+v, want stopped, supervisor restart", id[4], c)
	}
	if c := h.get(id[5]); c.Status != health.StatusCrashed || c.Reason != "supervisor restart" || c.PID != old.Process.Pid {
		t.Errorf("%s, whose old process lives: %s", id[5], describe(c))
	}

	// Every one that should run runs again, its counts untouched.
	want := map[int][2]int{0: {2, 3}, 3: {1, 1}, 4: {1, 2}, 6: {0, 0}}
	for slot, counts := range want {
		c := h.waitFor(id[slot], isStatus(health.StatusHealthy))
		if c.PID == dead || c.Restarts.RestartCount != counts[0] || c.Restarts.LifetimeRestarts != counts[1] {
			t.Errorf("%s after reconcile: %s, want restart_count %d, lifetime %d", id[slot], describe(c), counts[0], counts[1])
		}
		if slot != 6 && len(c.Restarts.Crashes) != 1 {
			t.Errorf("%s: crash window %v changed", id[slot], c.Restarts.Crashes)
		}
	}

	// The one whose old process lives has not been started; once that
	// process ends, it is.
	if got := spawnedPIDs(t, h.store, id[5]); len(got) != 0 {
		t.Errorf("%s started %v while its old process %d lives", id[5], got, old.Process.Pid)
	}
	if err := old.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = old.Wait()
	if c := h.waitFor(id[5], isStatus(health.StatusHealthy)); c.PID == old.Process.Pid || c.Restarts.LifetimeRestarts != 0 {
		t.Errorf("%s after its old process ended: %s", id[5], describe(c))
	}

	// Failed and held ones stay as they were, unstarted.
	h.sync()
	for slot, st := range map[int]health.Status{1: health.StatusFailed, 2: health.StatusStopped} {
		c := h.get(id[slot])
		if c.Status != st || c.PID != dead || (slot == 2 && !c.Held) || (slot == 1 && c.Restarts.LifetimeRestarts != 4) {
			t.Errorf("%s after reconcile: %s", id[slot], describe(c))
		}
		if got := spawnedPIDs(t, h.store, id[slot]); len(got) != 0 {
			t.Errorf("%s was started: %v", id[slot], got)
		}
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(tb testing.TB) int {
	tb.Helper()
	cmd := exec.Command(testWorker, "exit", "0")
	if err := cmd.Run(); err != nil {
		tb.Fatal(err)
	}
	return cmd.Process.Pid
}

// startOldWorker starts a process that looks like id's worker of an earlier
// supervisor (its environment names the component) and never beats. The
// test ends it; cleanup kills it if the test did not.
func startOldWorker(tb testing.TB, h *harness, id health.ComponentID) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(testWorker, "nobeat")
	cmd.Env = append(cmd.Environ(),
		health.EnvRedisURL+"="+h.cfg.RedisURL,
		health.EnvPrefix+"="+h.cfg.Prefix,
		health.EnvComponent+"="+id.String(),
		health.EnvHost+"="+h.cfg.Host,
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}
