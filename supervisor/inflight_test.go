package supervisor_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestTakeoverWaitsForAStartInFlight: fault explorer E36 (miniredis seed
// 95768, six seeds at a time). Invariant 1: never two live processes for
// one slot. Host h1 wrote the slot's record "starting" as its spawn does
// before it knows the new process's pid, and its lease was gone before it
// recorded that pid: h0 took the slot "from a lost host" and, finding no
// pid to wait for, started its own worker at once while h1's process,
// started a moment later, lived until h1's refused pid write fenced it
// (60 ms of two processes).
//
// A record of another host that says a process is starting but names none
// is a start in flight: the taker cannot find that process (on another
// machine it never could). Its host learns the slot is gone at its pid
// write or its next renewal, within a third of a lease, and kills what it
// started within stop_timeout: the taker waits that long before it starts
// its own worker, as a worker that exited as stale does (exitStale).
func TestTakeoverWaitsForAStartInFlight(t *testing.T) {
	t.Parallel()
	// h1's spawn: the record first (no pid yet), then the process, here a
	// stand-in that h1 would fence once its pid write is refused.
	env, id, inflight := startInFlight(t, "h1", "i1")

	const stopTimeout = time.Second
	fake := clock.NewFake(fakeStart)
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h0 := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Metrics: m,
		Host:    "h0", Lease: clusterLease, StopTimeout: stopTimeout,
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: checkEvery, StartTimeout: checkEvery},
		Policy:    shortBackoff,
		Clock:     fake,
	})
	h0.start()
	h0.logs.wait(t, 0, waitTimeout, "taking over slot from a lost host", "component="+id.String(), "from=h1")
	h0.sync()
	if c := h0.get(id); c.Instance == h0.cfg.Instance && c.PID != 0 && c.Status.Running() {
		t.Fatalf("h0 started worker %d at once while h1's start (process %d) was in flight: two processes for %s; record %s",
			c.PID, inflight.Process.Pid, id, describe(c))
	}
	// h1 fences what it started within a third of a lease and kills it
	// within stop_timeout; h0 starts once that has passed.
	wait := clusterLease/3 + stopTimeout + 250*time.Millisecond
	nextTimer(t, fake, wait, "the takeover's wait for the start in flight")
	_ = inflight.Process.Kill() // h1's fence
	fake.Advance(wait)
	c := h0.waitFor(id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.Instance == h0.cfg.Instance
	})
	if c.PID == inflight.Process.Pid || c.Restarts.RestartCount != 0 {
		t.Errorf("after the wait: %s (the start in flight was pid %s)", describe(c), strconv.Itoa(inflight.Process.Pid))
	}
	// A takeover's start, not a crash's (review of E36: it counted as one
	// after a backoff).
	if got := restartsByReason(t, m, "q"); got["takeover"] != 1 || got["backoff"] != 0 {
		t.Errorf("restarts counted by reason %v, want takeover 1 and no backoff", got)
	}
}

// restartsByReason reads vigil_worker_restarts_total{queue} by reason.
func restartsByReason(tb testing.TB, m *metrics.Metrics, queue string) map[string]float64 {
	tb.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "vigil_worker_restarts_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] == queue {
				got[labels["reason"]] += mt.GetCounter().GetValue()
			}
		}
	}
	return got
}

// TestOldProcessGoneDuringAnOutageLongerThanTheLease: fault explorer E36,
// the other half. A worker adopted while an earlier supervisor's process
// for its slot still lived waits for that process (waitingOld); when it
// went, the worker started at once, whatever its lease: not renewed for a
// lease (the host could not reach Redis, or was too slow to), the lease
// may have lapsed and the slot gone to another host, which then started
// it too (invariant 1). A start waits for the lease to be renewed
// (E32: leaseStale, holdStart): this one did not check.
func TestOldProcessGoneDuringAnOutageLongerThanTheLease(t *testing.T) {
	t.Parallel()
	h, p, direct := proxiedHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:      longBackoff,
		Lease:       time.Second,
		OpTimeout:   300 * time.Millisecond,
		StopTimeout: time.Minute, // the earlier process is not killed for its slowness here
	})
	id := ids("q", 1)[0]
	// This host's earlier instance left its worker running.
	old := exec.Command("sleep", "60")
	old.Env = append(os.Environ(), health.EnvComponent+"="+id.String())
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = old.Process.Kill()
			_ = old.Wait()
		}
	})
	writeRecord(t, direct, health.Component{ID: id, Status: health.StatusHealthy, Host: h.cfg.Host, Instance: "earlier",
		PID: old.Process.Pid, StartedAt: time.Now()})
	h.start()
	h.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(old.Process.Pid))
	p.Refuse(true)
	p.Cut()
	h.logs.wait(t, 0, waitTimeout, "redis unreachable")
	<-time.After(h.cfg.Lease + h.cfg.Lease/2) // the outage's length is the test's input
	mark := h.logs.mark()
	_ = old.Process.Kill()
	_ = old.Wait()
	reaped = true
	i := h.logs.waitAny(t, mark, waitTimeout, "start held", "worker started")
	if line := h.logs.line(i); !strings.Contains(line, "start held") {
		t.Errorf("a process was started for the slot while its lease had lapsed: %s", line)
	}
	p.Refuse(false)
	now := h.waitFor(id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.Instance == h.cfg.Instance
	})
	if now.Restarts.LifetimeRestarts != 0 {
		t.Errorf("the wait counted a restart: %s", describe(now))
	}
}

// startInFlight writes slot q:0's record as host's instance writes it for
// a start in flight (starting, no pid) on a Redis of the test's own, and
// starts a stand-in for that start's process, killed at cleanup.
func startInFlight(t *testing.T, host, instance string) (*testredis.Env, health.ComponentID, *exec.Cmd) {
	t.Helper()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	id := health.ComponentID{Queue: "q"}
	writeRecord(t, store, health.Component{ID: id, Status: health.StatusStarting, Host: host, Instance: instance,
		StartedAt: time.Now()})
	inflight := exec.Command("sleep", "60")
	if err := inflight.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inflight.Process.Kill(); _ = inflight.Wait() })
	return env, id, inflight
}
