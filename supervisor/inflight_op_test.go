package supervisor_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestOperatorActionDuringTheWaitForAStartInFlight (review rev2 of
// 0bb1ac8): invariant 1. A takeover from a host whose record says starting
// with no pid waits in backoff (afterInFlight) for that host to kill what
// it started. An operator restart (or reset with restart) of the slot in
// that wait disarms the restart timer and spawns at once: the wait E36
// added is bypassed while the start in flight may still run. A worker
// waiting for an earlier process it can see (waiting_old) refuses the
// same actions.
func TestOperatorActionDuringTheWaitForAStartInFlight(t *testing.T) {
	for _, action := range []string{"restart", "reset+restart"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			env, id, inflight := startInFlight(t, "h1", "i1") // h1's start in flight, alive until h1 fences it
			fake := clock.NewFake(fakeStart)
			h0 := newHarnessOn(t, env.Client, env.URL, env.Prefix, inFlightConfig("h0", fake))
			h0.start()
			h0.logs.wait(t, 0, waitTimeout, "waiting for it to stop that process", "from=h1")
			h0.sync()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			if action == "restart" {
				_, err = h0.sup.Restart(ctx, id)
			} else {
				_, err = h0.sup.Reset(ctx, id, true)
			}
			h0.sync()
			if c := h0.get(id); c.Instance == h0.cfg.Instance && c.Status.Running() {
				t.Fatalf("operator %s (err %v) during the wait for h1's start in flight (process %d, alive) started h0's worker at once: %s",
					action, err, inflight.Process.Pid, describe(c))
			}
		})
	}
}

// TestShutdownDuringTheWaitForAStartInFlight (review rev2 of 0bb1ac8):
// invariant 1. h0 took the slot from h1 whose start was in flight and
// waits (afterInFlight, backoff). h0 shuts down gracefully meanwhile: a
// worker in backoff is let go at once and the lease released; the record
// says crashed (host h1, no pid), and h2, claiming the slot, starts it at
// once (a crashed record of another host), while h1's start in flight may
// still run: the wait does not survive the slot's move. The same for a
// release (drain, pool shrink, rebalance): the record then says stopped.
func TestShutdownDuringTheWaitForAStartInFlight(t *testing.T) {
	t.Parallel()
	env, id, inflight := startInFlight(t, "h1", "i1")
	cfg := func(host string) supervisor.Config { return inFlightConfig(host, nil) }
	h0 := newHarnessOn(t, env.Client, env.URL, env.Prefix, cfg("h0"))
	h0.start()
	h0.logs.wait(t, 0, waitTimeout, "waiting for it to stop that process", "from=h1")
	took := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h0.sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("after h0's stop: %s", describe(h0.get(id)))
	h2 := newHarnessOn(t, env.Client, env.URL, env.Prefix, cfg("h2"))
	h2.start()
	wait := 3*time.Second/3 + time.Second + 250*time.Millisecond
	h2.logs.wait(t, 0, waitTimeout, "worker started")
	if since := time.Since(took); since < wait {
		t.Fatalf("h2 started the slot %s after h0 took it over from h1's start in flight (process %d alive), not %s: %s",
			since.Round(time.Millisecond), inflight.Process.Pid, wait, describe(h2.get(id)))
	}
}

// TestRestartedHostOverItsOwnStartInFlight (review rev2 of 0bb1ac8):
// invariant 1. This host's earlier instance wrote the slot's record
// starting, started the process and died (or lost Redis, then died) before
// its pid write: the record names this host, another instance, and no pid.
// The new instance takes it as its own (rec.Host == cfg.Host), writes it
// crashed and, with no pid to wait for (afterOld with pid 0), starts its
// worker at once while the earlier process lives on this very machine
// until its parent-death shutdown ends (up to stop_timeout). E36's wait
// covers another host's start in flight only.
func TestRestartedHostOverItsOwnStartInFlight(t *testing.T) {
	t.Parallel()
	env, id, inflight := startInFlight(t, "h0", "earlier") // the earlier instance's process, its pid never recorded
	fake := clock.NewFake(fakeStart)
	h0 := newHarnessOn(t, env.Client, env.URL, env.Prefix, inFlightConfig("h0", fake))
	h0.start()
	h0.sync()
	if c := h0.get(id); c.Instance == h0.cfg.Instance && c.Status.Running() {
		t.Fatalf("the new instance started the slot at once over its earlier instance's start in flight (process %d alive): %s",
			inflight.Process.Pid, describe(c))
	}
}

// TestRestartedHostFindsItsOwnStartInFlight: the other half of the fix
// for TestRestartedHostOverItsOwnStartInFlight. The earlier instance's
// process is on this machine, its environment naming the slot, the
// cluster's Redis URL and prefix, this host and a spawn of that instance: the new instance finds
// it, waits for it as for a process whose pid was recorded (waiting_old,
// SIGKILL at stop_timeout) and starts the slot only once it is gone.
func TestRestartedHostFindsItsOwnStartInFlight(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	id := health.ComponentID{Queue: "q"}
	writeRecord(t, store, health.Component{ID: id, Status: health.StatusStarting, Host: "h0", Instance: "earlier",
		StartedAt: time.Now()})
	inflight := exec.Command("sleep", "60")
	inflight.Env = append(os.Environ(), health.EnvComponent+"="+id.String(), health.EnvRedisURL+"="+env.URL,
		health.EnvPrefix+"="+store.Keys().Prefix, health.EnvHost+"=h0", health.EnvSpawn+"=earlier.7")
	inflight.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := inflight.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = inflight.Wait(); close(exited) }()
	t.Cleanup(func() { _ = inflight.Process.Kill(); <-exited })
	h0 := newHarnessOn(t, env.Client, env.URL, env.Prefix, inFlightConfig("h0", nil))
	h0.start()
	h0.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(inflight.Process.Pid))
	c := h0.waitFor(id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.Instance == h0.cfg.Instance
	})
	select {
	case <-exited:
	default:
		t.Fatalf("h0 started the slot while its earlier instance's process %d lived: %s", inflight.Process.Pid, describe(c))
	}
}

// inFlightConfig is the configuration of a host taking over a slot whose
// start is in flight elsewhere: one worker, a 3 s lease, quick judging;
// clk nil is real time.
func inFlightConfig(host string, clk clock.Clock) supervisor.Config {
	return supervisor.Config{
		Host: host, Lease: 3 * time.Second, StopTimeout: time.Second,
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: checkEvery, StartTimeout: checkEvery},
		Policy:    shortBackoff,
		Clock:     clk,
	}
}
