package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

// TestStopHonoursContext (issue 12, defect 2; issue 18): Stop returns when
// its context ends although a worker has not exited (it ignores SIGTERM,
// and stop_timeout never passes on the fake clock), having SIGKILLed it. A
// second Stop is safe.
func TestStopHonoursContext(t *testing.T) {
	t.Parallel()
	h, _ := fakeHarness(t, policy.Config{}, "ignore-term")
	killStrays(t, h.cfg.Prefix)
	id := health.ComponentID{Queue: "q"}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID

	const budget = time.Second
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		done <- h.sup.Stop(ctx)
	}()
	err := receive(t, done, budget+5*time.Second, "Stop to return after its context ended")
	took := time.Since(begin)
	t.Logf("Stop returned after %s: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want the context's error", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d alive after Stop returned", pid)
		}
		<-time.After(10 * time.Millisecond) // polling a process's state in /proc
	}
	if err := h.sup.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
