package supervisor_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// fakeStart is where the fake clocks of these tests begin.
var fakeStart = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// checkEvery is the heartbeat TTL and start timeout of the fake-clock
// tests: the supervisor's heartbeat check timers are all this long, so they
// cannot be mistaken for a backoff, and they never fall due unless a test
// advances that far.
const checkEvery = time.Hour

// fakeHarness is a supervisor driven by a fake clock, with one pool q of one
// worker running args.
func fakeHarness(t testing.TB, pol policy.Config, args ...string) (*harness, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(fakeStart)
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: append([]string{testWorker}, args...)}},
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: checkEvery, StartTimeout: checkEvery},
		Policy:    pol,
		Clock:     fake,
	})
	return h, fake
}

// nextTimer waits for the next timer the supervisor schedules and checks
// its length.
func nextTimer(t testing.TB, fake *clock.Fake, want time.Duration, what string) {
	t.Helper()
	if got := receive(t, fake.Scheduled(), waitTimeout, what); got != want {
		t.Fatalf("%s: timer of %v scheduled, want %v (pending %v)", what, got, want, fake.Pending())
	}
}

// noTimer fails if a timer was scheduled since the last one received.
func noTimer(t testing.TB, fake *clock.Fake) {
	t.Helper()
	select {
	case d := <-fake.Scheduled():
		t.Fatalf("unexpected timer of %v scheduled (pending %v)", d, fake.Pending())
	default:
	}
}

func wantPending(t testing.TB, fake *clock.Fake, want ...time.Duration) {
	t.Helper()
	if got := fake.Pending(); !slices.Equal(got, want) {
		t.Fatalf("pending timers %v, want %v", got, want)
	}
}

// crashLoop drives a crash-looping worker through the given backoffs: each
// spawn arms a heartbeat check, each crash exactly one restart timer of the
// next delay, which the test lets fall due.
func crashLoop(t testing.TB, fake *clock.Fake, delays ...time.Duration) {
	t.Helper()
	for i, d := range delays {
		nextTimer(t, fake, checkEvery, "heartbeat check of spawn "+strconv.Itoa(i+1))
		nextTimer(t, fake, d, "restart timer after crash "+strconv.Itoa(i+1))
		// The check timer went with the process; the restart is alone.
		wantPending(t, fake, d)
		fake.Advance(d)
	}
}

// TestBackoffDelaysAndRapidLimit is docs/design.md §5's worked example on a
// worker that exits 1 at once: restarts after exactly 1, 2, 4 and 8 s; the
// 5th crash within the window makes it failed with lifetime_restarts 4, and
// nothing is scheduled or spawned after that.
func TestBackoffDelaysAndRapidLimit(t *testing.T) {
	t.Parallel()
	h, fake := fakeHarness(t, policy.Config{}, "exit", "1")
	id := health.ComponentID{Queue: "q"}
	h.start()
	crashLoop(t, fake, time.Second, 2*time.Second, 4*time.Second, 8*time.Second)
	nextTimer(t, fake, checkEvery, "heartbeat check of spawn 5")

	c := h.waitFor(id, isStatus(health.StatusFailed))
	h.sync()
	wantPending(t, fake)
	noTimer(t, fake)
	r := c.Restarts
	if r.LifetimeRestarts != 4 || r.RestartCount != 4 || len(r.Crashes) != 5 {
		t.Errorf("restart history %+v, want lifetime 4, count 4, 5 crashes in the window", r)
	}
	if !strings.HasPrefix(r.FailureReason, policy.ReasonRapid) || !r.FailedAt.Equal(fakeStart.Add(15*time.Second)) {
		t.Errorf("failure %q at %v, want rapid at +15s", r.FailureReason, r.FailedAt.Sub(fakeStart))
	}
	if !c.HasExit || c.ExitCode != 1 {
		t.Errorf("failed record exit_code %d (has %v), want 1", c.ExitCode, c.HasExit)
	}

	// Time goes on: a failed worker stays down.
	fake.Advance(24 * time.Hour)
	h.sync()
	noTimer(t, fake)
	if got := spawnedPIDs(t, h.store, id); len(got) != 5 {
		t.Errorf("spawned %d processes %v, want 5", len(got), got)
	}
	if c := h.get(id); c.Status != health.StatusFailed {
		t.Errorf("status %s a day later, want failed", c.Status)
	}
}

// TestLifetimeLimit: with a large window allowance, the lifetime limit ends
// the loop: the crash that finds lifetime_restarts = max_lifetime fails it.
func TestLifetimeLimit(t *testing.T) {
	t.Parallel()
	h, fake := fakeHarness(t, policy.Config{MaxLifetime: 3, MaxInWindow: 100}, "exit", "1")
	id := health.ComponentID{Queue: "q"}
	h.start()
	crashLoop(t, fake, time.Second, 2*time.Second, 4*time.Second)
	nextTimer(t, fake, checkEvery, "heartbeat check of spawn 4")
	c := h.waitFor(id, isStatus(health.StatusFailed))
	h.sync()
	wantPending(t, fake)
	noTimer(t, fake)
	if r := c.Restarts; r.LifetimeRestarts != 3 || !strings.HasPrefix(r.FailureReason, policy.ReasonLifetime) {
		t.Errorf("restart history %+v, want lifetime 3, failure %s", r, policy.ReasonLifetime)
	}
	if got := spawnedPIDs(t, h.store, id); len(got) != 4 {
		t.Errorf("spawned %d processes, want 4", len(got))
	}
}

// TestOneRestartTimer: while a restart is pending, an operator restart
// replaces it (the old timer is cancelled, not left to fire a second
// spawn), and a stop cancels it.
func TestOneRestartTimer(t *testing.T) {
	t.Parallel()
	h, fake := fakeHarness(t, policy.Config{}, "exit", "1")
	id := health.ComponentID{Queue: "q"}
	ctx := context.Background()
	h.start()
	nextTimer(t, fake, checkEvery, "first heartbeat check")
	nextTimer(t, fake, time.Second, "restart timer after crash 1")
	wantPending(t, fake, time.Second)

	// Operator restart during the backoff: spawns now, not counted.
	c, err := h.sup.Restart(ctx, id)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Status != health.StatusStarting || c.Restarts.RestartCount != 1 || c.Restarts.LifetimeRestarts != 1 {
		t.Errorf("after Restart: %s, restarts %+v; want starting with the history unchanged", c.Status, c.Restarts)
	}
	nextTimer(t, fake, checkEvery, "heartbeat check of the operator's spawn")
	// It crashes again (counted): one restart timer, of the next delay.
	nextTimer(t, fake, 2*time.Second, "restart timer after crash 2")
	wantPending(t, fake, 2*time.Second)

	// The cancelled 1 s timer's moment passes: nothing is spawned.
	fake.Advance(time.Second)
	h.sync()
	noTimer(t, fake)
	if got := spawnedPIDs(t, h.store, id); len(got) != 2 {
		t.Fatalf("spawned %d processes, want 2", len(got))
	}

	// Restart twice in a row while pending: still one timer after it.
	for _, d := range []time.Duration{4 * time.Second, 8 * time.Second} {
		if _, err := h.sup.Restart(ctx, id); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		nextTimer(t, fake, checkEvery, "heartbeat check of the operator's spawn")
		nextTimer(t, fake, d, "restart timer")
		wantPending(t, fake, d)
	}

	// A held stop during the backoff cancels the timer.
	c, err = h.sup.StopComponent(ctx, id)
	if err != nil {
		t.Fatalf("StopComponent: %v", err)
	}
	if c.Status != health.StatusStopped || !c.Held {
		t.Errorf("after stop: %s held %v, want stopped and held", c.Status, c.Held)
	}
	wantPending(t, fake)
	fake.Advance(time.Hour)
	h.sync()
	noTimer(t, fake)
	if got := spawnedPIDs(t, h.store, id); len(got) != 4 {
		t.Errorf("spawned %d processes, want 4", len(got))
	}
}
