package supervisor_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestOperatorActions walks one worker through reset and restart
// (docs/design.md §5, §7): a reset of a running worker is refused, an operator
// restart of a failed one keeps lifetime_restarts and clears the rest, a
// reset clears everything and holds it stopped, and reset with restart
// starts it.
func TestOperatorActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		// Two crashes in the window make it failed.
		Policy: policy.Config{BackoffBase: shortBackoff.BackoffBase, BackoffMax: shortBackoff.BackoffMax, MaxInWindow: 2},
	})
	id := health.ComponentID{Queue: "q"}
	ctx := context.Background()
	h.start()

	// failTwice SIGKILLs the healthy worker, waits for its restart, and
	// SIGKILLs that one too: the second crash fails it.
	failTwice := func(wantLifetime int) health.Component {
		t.Helper()
		pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
		kill(t, pid)
		pid2 := h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != pid }).PID
		kill(t, pid2)
		c := h.waitFor(id, isStatus(health.StatusFailed))
		if c.Restarts.LifetimeRestarts != wantLifetime || c.Restarts.FailedAt.IsZero() || len(c.Restarts.Crashes) != 2 {
			t.Fatalf("failed record: %s, crashes %d", describe(c), len(c.Restarts.Crashes))
		}
		return c
	}

	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	_, err := h.sup.Reset(ctx, id, false)
	if !errors.Is(err, health.ErrTransition) {
		t.Fatalf("Reset of a healthy worker: err %v, want one wrapping health.ErrTransition", err)
	}
	if c := h.get(id); c.Status != health.StatusHealthy || c.PID != pid {
		t.Fatalf("the refused reset changed the worker: %s", describe(c))
	}

	failTwice(1)
	// Operator restart of a failed worker: the window and the consecutive
	// count go, the lifetime count stays.
	c, err := h.sup.Restart(ctx, id)
	if err != nil {
		t.Fatalf("Restart of a failed worker: %v", err)
	}
	if c.Status != health.StatusStarting {
		t.Errorf("Restart answered %s, want starting", c.Status)
	}
	c = h.waitFor(id, isStatus(health.StatusHealthy))
	if r := c.Restarts; r.RestartCount != 0 || r.LifetimeRestarts != 1 || len(r.Crashes) != 0 || !r.FailedAt.IsZero() || r.FailureReason != "" {
		t.Errorf("after the operator restart of a failed worker: restarts %+v, want lifetime 1 and the rest cleared", r)
	}

	failTwice(2)
	// Reset: stopped, held, every counter cleared; nothing starts it.
	c, err = h.sup.Reset(ctx, id, false)
	if err != nil {
		t.Fatalf("Reset of a failed worker: %v", err)
	}
	stored := h.get(id)
	for _, c := range []health.Component{c, stored} {
		r := c.Restarts
		if c.Status != health.StatusStopped || !c.Held || r.RestartCount != 0 || r.LifetimeRestarts != 0 ||
			len(r.Crashes) != 0 || !r.FailedAt.IsZero() || r.FailureReason != "" {
			t.Errorf("after reset: %s, crashes %d", describe(c), len(r.Crashes))
		}
	}
	if cs := h.sync(); cs[0].Status != health.StatusStopped {
		t.Errorf("the monitor holds %s after reset", cs[0].Status)
	}

	// A held one may be reset again; with restart it starts.
	c, err = h.sup.Reset(ctx, id, true)
	if err != nil {
		t.Fatalf("Reset with restart: %v", err)
	}
	if c.Status != health.StatusStarting || c.Held {
		t.Errorf("Reset with restart answered %s held %v, want starting, not held", c.Status, c.Held)
	}
	c = h.waitFor(id, isStatus(health.StatusHealthy))
	if r := c.Restarts; r.RestartCount != 0 || r.LifetimeRestarts != 0 || len(r.Crashes) != 0 || c.Held {
		t.Errorf("healthy after reset with restart: %s", describe(c))
	}

	// Unknown components are an error of their own.
	if _, err := h.sup.Restart(ctx, health.ComponentID{Queue: "q", Slot: 7}); !errors.Is(err, supervisor.ErrUnknownComponent) {
		t.Errorf("Restart of an unknown component: %v, want ErrUnknownComponent", err)
	}
}

// TestRestartRunning: an operator restart of a running worker stops it
// gracefully and starts a new process, counting nothing.
func TestRestartRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	old := h.waitFor(id, isStatus(health.StatusHealthy))
	ev := newEventReader(t, h.store)
	c, err := h.sup.Restart(context.Background(), id)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Status != health.StatusStarting || c.PID == old.PID {
		t.Errorf("Restart answered %s pid %d (old %d)", c.Status, c.PID, old.PID)
	}
	stopped := ev.waitEvent(id, func(w health.WorkerView) bool { return w.Status == string(health.StatusStopped) })
	if stopped.PID != old.PID || stopped.ExitCode == nil || *stopped.ExitCode != 0 || stopped.Reason != "operator restart" {
		t.Errorf("the old process's stop: %+v", stopped)
	}
	c = h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != old.PID })
	if c.Restarts.RestartCount != 0 || c.Restarts.LifetimeRestarts != 0 {
		t.Errorf("an operator restart was counted: %+v", c.Restarts)
	}
	if err := syscall.Kill(old.PID, 0); err != syscall.ESRCH {
		t.Errorf("old process: kill(%d, 0) = %v, want ESRCH", old.PID, err)
	}
}

func kill(tb testing.TB, pid int) {
	tb.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		tb.Fatalf("kill %d: %v", pid, err)
	}
}
