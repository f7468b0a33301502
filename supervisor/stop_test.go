package supervisor_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestStopComponentGraceful: an operator stop sends SIGTERM, the worker
// exits 0, the record is stopped and held, and no restart follows however
// far the clock moves.
func TestStopComponentGraceful(t *testing.T) {
	t.Parallel()
	h, fake := fakeHarness(t, policy.Config{}, "beat")
	id := health.ComponentID{Queue: "q"}
	ctx := context.Background()
	h.start()
	nextTimer(t, fake, checkEvery, "heartbeat check")
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID

	c, err := h.sup.StopComponent(ctx, id)
	if err != nil {
		t.Fatalf("StopComponent: %v", err)
	}
	nextTimer(t, fake, h.cfg.StopTimeout, "stop timeout")
	stored := h.get(id)
	for _, c := range []health.Component{c, stored} {
		if c.Status != health.StatusStopped || !c.Held || !c.HasExit || c.ExitCode != 0 || c.Signal != "" || c.Reason != "operator stop" {
			t.Errorf("after stop: %s", describe(c))
		}
	}
	if c.PID != pid {
		t.Errorf("stopped record pid %d, want %d", c.PID, pid)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("kill(%d, 0) = %v after stop, want ESRCH", pid, err)
	}
	wantPending(t, fake) // the kill timer went with the process

	fake.Advance(24 * time.Hour)
	h.sync()
	noTimer(t, fake)
	if got := spawnedPIDs(t, h.store, id); len(got) != 1 {
		t.Errorf("spawned %v, want only the first process", got)
	}
	if c := h.get(id); c.Status != health.StatusStopped || !c.Held || c.Restarts.RestartCount != 0 {
		t.Errorf("a day after the stop: %s", describe(c))
	}
}

// TestStopSupervisor: Stop ends every running and crashed component
// stopped with reason host shutdown, not held, in parallel and within
// stop_timeout + 2 s; failed and held ones stay as they were.
func TestStopSupervisor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{
			{Queue: "q", Workers: 3, Command: []string{testWorker, "beat"}},
			{Queue: "c", Workers: 1, Command: []string{testWorker, "exit", "1"}},
			{Queue: "f", Workers: 1, Command: []string{testWorker, "beat"}},
			{Queue: "held", Workers: 1, Command: []string{testWorker, "beat"}},
		},
		Policy:      longBackoff,
		StopTimeout: 2 * time.Second,
	})
	ctx := context.Background()
	failed := health.ComponentID{Queue: "f"}
	held := health.ComponentID{Queue: "held"}
	writeRecord(t, h.store, health.Component{ID: failed, Status: health.StatusFailed, Host: "h1",
		Restarts: policy.State{RestartCount: 4, LifetimeRestarts: 4, FailedAt: time.Now(), FailureReason: "rapid: test"}})
	writeRecord(t, h.store, health.Component{ID: held, Status: health.StatusStopped, Held: true, Host: "h1"})
	h.start()
	running := ids("q", 3)
	before := h.waitHealthy(running...)
	crashed := health.ComponentID{Queue: "c"}
	h.waitFor(crashed, isStatus(health.StatusCrashed))

	begin := time.Now()
	if err := h.sup.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	took := time.Since(begin)
	t.Logf("Stop took %v", took)
	if limit := h.cfg.StopTimeout + 2*time.Second; took > limit {
		t.Errorf("Stop took %v, want at most stop_timeout + 2s = %v", took, limit)
	}
	for i, id := range append(running, crashed) {
		c := h.get(id)
		if c.Status != health.StatusStopped || c.Reason != "host shutdown" || c.Held {
			t.Errorf("%s after Stop: %s", id, describe(c))
		}
		if i < len(before) {
			if !c.HasExit || c.ExitCode != 0 {
				t.Errorf("%s exit_code %d (has %v), want 0", id, c.ExitCode, c.HasExit)
			}
			if err := syscall.Kill(before[i].PID, 0); err != syscall.ESRCH {
				t.Errorf("%s: kill(%d, 0) = %v after Stop, want ESRCH", id, before[i].PID, err)
			}
		}
	}
	if c := h.get(failed); c.Status != health.StatusFailed || c.Restarts.LifetimeRestarts != 4 {
		t.Errorf("failed component after Stop: %s", describe(c))
	}
	if c := h.get(held); c.Status != health.StatusStopped || !c.Held || c.Reason == "host shutdown" {
		t.Errorf("held component after Stop: %s", describe(c))
	}
	// Stop is safe twice, and actions are refused after it.
	if err := h.sup.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := h.sup.Restart(ctx, running[0]); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

// TestStopTimeoutKills: a worker that ignores SIGTERM is SIGKILLed after
// stop_timeout and recorded stopped with reason stop timeout.
func TestStopTimeoutKills(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "ignore-term"}}},
		Policy: shortBackoff,
		// Not 1s, which Config allows: workers then get
		// VIGIL_SHUTDOWN_TIMEOUT=0s, which health.LoadWorkerEnv refuses.
		StopTimeout: 2 * time.Second,
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	begin := time.Now()
	c, err := h.sup.StopComponent(context.Background(), id)
	took := time.Since(begin)
	if err != nil {
		t.Fatalf("StopComponent: %v", err)
	}
	t.Logf("stop took %v (stop_timeout %v)", took, h.cfg.StopTimeout)
	if took < h.cfg.StopTimeout || took > h.cfg.StopTimeout+5*time.Second {
		t.Errorf("stop took %v, want stop_timeout %v and a little", took, h.cfg.StopTimeout)
	}
	stored := h.get(id)
	for _, c := range []health.Component{c, stored} {
		if c.Status != health.StatusStopped || c.Reason != "stop timeout" || !c.Held ||
			c.ExitCode != 137 || c.Signal != "SIGKILL" || c.PID != pid {
			t.Errorf("after stop: %s", describe(c))
		}
	}
	if c.Restarts.RestartCount != 0 {
		t.Errorf("a stop was counted: %+v", c.Restarts)
	}
}

// writeRecord stores c as it is (no status check), with its history, as an
// earlier supervisor would have left it.
func writeRecord(tb testing.TB, store *health.Store, c health.Component) {
	tb.Helper()
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = time.Now()
	}
	if _, err := store.Write(context.Background(), c, health.Write{NoCheck: true, Restarts: true, Index: true}); err != nil {
		tb.Fatalf("write %s: %v", c.ID, err)
	}
}
