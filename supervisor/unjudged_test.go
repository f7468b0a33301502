package supervisor_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestUnjudgedCrashKeepsTheStableRunReset (review of the E41 fix, 00ec81c): a worker
// healthy for longer than stable_after that crashes is restarted with its
// consecutive count reset (policy step 1), whether Redis answered when it
// died or not. The verdict on an exit seen while Redis was away must see
// that the process was healthy when it died.
func TestUnjudgedCrashKeepsTheStableRunReset(t *testing.T) {
	t.Parallel()
	stable := 400 * time.Millisecond
	h, srv := serverHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, StableAfter: stable},
	})
	id := ids("q", 1)[0]
	h.start()
	c := h.waitHealthy(id)[0]
	// A first crash, Redis answering: one consecutive restart.
	kill(t, c.PID)
	prev := c.PID
	c = h.waitFor(id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.PID != prev && c.Restarts.RestartCount == 1
	})
	// It runs healthy for longer than stable_after (time passing is the
	// test's input).
	<-time.After(time.Until(c.HealthySince.Add(stable + h.cfg.Heartbeat.TTL + 300*time.Millisecond)))
	// Control, Redis answering: the count decays, then counts this crash.
	kill(t, c.PID)
	prev = c.PID
	c = h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != prev })
	if c.Restarts.RestartCount != 1 {
		t.Fatalf("control: after a stable run, crash with Redis up: %s, want restart_count 1", describe(c))
	}
	<-time.After(time.Until(c.HealthySince.Add(stable + h.cfg.Heartbeat.TTL + 300*time.Millisecond)))
	// The same crash while Redis is away (its data kept).
	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	kill(t, c.PID)
	prev = c.PID
	h.logs.wait(t, mark, waitTimeout, "component="+id.String(), "worker exited while Redis is away")
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	c = h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != prev })
	if c.Restarts.RestartCount != 1 || c.Restarts.LifetimeRestarts != 3 {
		t.Errorf("after a stable run, crash while Redis was away: %s, want restart_count 1 (decayed), lifetime 3", describe(c))
	}
}
