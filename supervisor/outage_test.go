package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// outageHarness runs n beat workers of queue q (TTL 1 s) against a
// redis-server of the test's own, which the test stops and starts.
func outageHarness(t testing.TB, n int) (*harness, *testredis.Server) {
	t.Helper()
	return serverHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy:    shortBackoff,
		Heartbeat: stallBeat, // the workers beat again within a TTL of Redis's return, on a loaded machine too
	})
}

// serverHarness is a harness on a redis-server of its own, which the test
// may stop, start and wipe.
func serverHarness(t testing.TB, cfg supervisor.Config) (*harness, *testredis.Server) {
	t.Helper()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return newHarnessOn(t, rdb, srv.URL, "vigil:", cfg), srv
}

// outage stops the server, waits until the supervisor has noticed and
// more than two TTLs have passed (the outage's length is the test's input:
// this wait is for time to pass, not for a goroutine), runs during, and
// starts the server again empty. It returns once the supervisor has seen
// Redis back.
func outage(t testing.TB, h *harness, srv *testredis.Server, during func()) {
	t.Helper()
	mark := h.logs.mark()
	srv.Stop()
	down := time.Now()
	if during != nil {
		during()
	}
	ttl := h.cfg.Heartbeat.TTL
	h.logs.wait(t, mark, ttl+waitTimeout, "redis unreachable")
	<-time.After(time.Until(down.Add(2*ttl + ttl/2)))
	srv.Wipe()
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	t.Logf("Redis was away %v", time.Since(down).Round(time.Millisecond))
}

func notRunning(w health.WorkerView) bool {
	return w.Status == string(health.StatusCrashed) || w.Status == string(health.StatusFailed) ||
		w.Status == string(health.StatusStopping) || w.Status == string(health.StatusStopped)
}

// TestRedisOutageKillsNothing: Redis goes away for more than two TTLs and
// comes back empty. No worker is killed or restarted, nothing is counted,
// and the records, restart history included, are written again from what
// the supervisor holds (docs/design.md §11).
func TestRedisOutageKillsNothing(t *testing.T) {
	t.Parallel()
	h, srv := outageHarness(t, 3)
	id := ids("q", 3)
	h.start()
	first := h.waitHealthy(id...)
	// Give slot 0 a restart history, for Redis to lose and get back.
	kill(t, first[0].PID)
	h.waitFor(id[0], func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != first[0].PID })
	before := h.waitHealthy(id...)
	if before[0].Restarts.RestartCount != 1 {
		t.Fatalf("%s before the outage: %s", id[0], describe(before[0]))
	}

	outage(t, h, srv, nil)
	// A TTL of grace and one more: no worker may be judged hung.
	newEventReader(t, h.store).expectNone(2*h.cfg.Heartbeat.TTL, notRunning)

	for i, c := range h.waitHealthy(id...) {
		b := before[i]
		if c.PID != b.PID || c.Restarts.RestartCount != b.Restarts.RestartCount ||
			c.Restarts.LifetimeRestarts != b.Restarts.LifetimeRestarts || len(c.Restarts.Crashes) != len(b.Restarts.Crashes) {
			t.Errorf("%s after the outage: %s; before: %s", id[i], describe(c), describe(b))
		}
		if c.Host != "h1" || c.Instance != b.Instance {
			t.Errorf("%s after the outage: host %q instance %q, want h1, %q", id[i], c.Host, c.Instance, b.Instance)
		}
		if err := syscall.Kill(c.PID, 0); err != nil {
			t.Errorf("%s: process %d: %v", id[i], c.PID, err)
		}
	}
	for i, c := range h.sync() {
		if c.Status != health.StatusHealthy || c.PID != before[i].PID {
			t.Errorf("the monitor holds %s: %s", id[i], describe(c))
		}
	}
	for i := range id {
		for _, pid := range spawnedPIDs(t, h.store, id[i]) {
			if pid != before[i].PID {
				t.Errorf("%s: process %d spawned since Redis came back", id[i], pid)
			}
		}
	}
}

// TestRedisOutageCrashCounted: a worker that dies while Redis is away
// (restarted with its data, within a lease) is counted as crashed once
// Redis answers and this host's lease is found unbroken (fault explorer
// E41: until then it cannot be told from another host's takeover); its
// replacement is held until then (E40: a process started while Redis is
// away could run beside another host's). The other worker is untouched.
func TestRedisOutageCrashCounted(t *testing.T) {
	t.Parallel()
	h, srv := outageHarness(t, 2)
	id := ids("q", 2)
	h.start()
	before := h.waitHealthy(id...)
	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	kill(t, before[0].PID)
	h.logs.wait(t, mark, waitTimeout, "component="+id[0].String(), "worker exited while Redis is away")
	h.logs.wait(t, mark, waitTimeout, "component="+id[0].String(), "start held")
	cs := h.sync()
	if cs[0].Restarts.RestartCount != 0 || cs[0].Status != health.StatusCrashed {
		t.Errorf("the monitor holds %s during the outage: %s, want crashed, nothing counted yet", id[0], describe(cs[0]))
	}
	if i, ok := h.logs.find(mark, `msg="worker started"`, "component="+id[0].String()); ok {
		t.Errorf("a process started during the outage: %s", h.logs.line(i))
	}
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	c := h.waitFor(id[0], func(c health.Component) bool { return c.Status == health.StatusHealthy && c.Restarts.RestartCount == 1 })
	restarted := c.PID
	if c.PID == before[0].PID || c.Restarts.LifetimeRestarts != 1 || len(c.Restarts.Crashes) != 1 {
		t.Errorf("%s after the outage: %s, want a new process, one crash", id[0], describe(c))
	}
	newEventReader(t, h.store).expectNone(2*h.cfg.Heartbeat.TTL, notRunning)
	if c := h.get(id[0]); c.PID != restarted || c.Status != health.StatusHealthy {
		t.Errorf("%s later: %s", id[0], describe(c))
	}
	if c := h.get(id[1]); c.PID != before[1].PID || c.Status != health.StatusHealthy || c.Restarts.LifetimeRestarts != 0 {
		t.Errorf("%s after the outage: %s", id[1], describe(c))
	}
}

// TestRedisLostDataNoticedWithoutOutage: Redis loses its data between two
// calls of the supervisor (a restart without persistence it never saw
// fail): the workers' heartbeats re-create their records, but only the
// supervisor knows the restart history and its instance. It notices its
// own host record gone at its next tick and writes everything again.
func TestRedisLostDataNoticedWithoutOutage(t *testing.T) {
	t.Parallel()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHarnessOn(t, rdb, srv.URL, "vigil:", supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 2, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff, Lease: 900 * time.Millisecond,
	})
	id := ids("q", 2)
	h.start()
	first := h.waitHealthy(id...)
	kill(t, first[0].PID)
	h.waitFor(id[0], func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != first[0].PID })
	before := h.waitHealthy(id...)

	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range id {
		// The supervisor writes what it knows: a worker it has not judged
		// yet (its first heartbeat deadline not reached) is written
		// starting, and its next beat makes it healthy again.
		c := h.waitFor(id[i], func(c health.Component) bool { return c.Instance != "" && c.Status == health.StatusHealthy })
		b := before[i]
		if c.PID != b.PID || c.Status != health.StatusHealthy || c.Instance != b.Instance ||
			c.Restarts.LifetimeRestarts != b.Restarts.LifetimeRestarts || len(c.Restarts.Crashes) != len(b.Restarts.Crashes) {
			t.Errorf("%s after the data loss: %s; before: %s", id[i], describe(c), describe(b))
		}
	}
	if n, err := rdb.SCard(context.Background(), "vigil:components").Result(); err != nil || n != 2 {
		t.Errorf("component index after the data loss: %d, %v", n, err)
	}
}

// TestRedisOutageLongerThanLeaseLosesNoHost: after an outage longer than a
// lease, every record has expired, this host's included; the leader must
// not announce itself lost.
func TestRedisOutageLongerThanLeaseLosesNoHost(t *testing.T) {
	t.Parallel()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHarnessOn(t, rdb, srv.URL, "vigil:", supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff, Lease: 900 * time.Millisecond,
	})
	h.start()
	h.waitHealthy(ids("q", 1)...)
	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	<-time.After(2 * h.cfg.Lease) // the outage's length is the test's input
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	// Watch three ticks (a lease): wall time passing is the input here.
	<-time.After(h.cfg.Lease)
	msgs, err := rdb.XRange(context.Background(), h.store.Keys().Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if data, _ := m.Values["data"].(string); strings.Contains(data, `"status":"lost"`) {
			t.Errorf("event %s", data)
		}
	}
}

// TestRestartDuringAnOutageLongerThanTheLease: fault explorer E32 (seed
// 94146, six seeds at a time). An operator restarted a worker while its
// host could not reach Redis for longer than the lease: the old process
// stopped and the new one started, although the slot's lease had lapsed.
// Another host took the slot meanwhile and started it too: two live
// processes for one slot (invariant 1) until the first host's next write
// fenced its own. A start waits for the lease to be renewed, as a restart
// after a backoff already did; the restart is answered, and the worker
// starts once Redis answers and the lease is this host's again.
func TestRestartDuringAnOutageLongerThanTheLease(t *testing.T) {
	t.Parallel()
	h, p, _ := proxiedHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		Lease:     time.Second,
		OpTimeout: 300 * time.Millisecond,
	})
	id := ids("q", 1)[0]
	h.start()
	before := h.waitHealthy(id)[0]
	p.Refuse(true)
	p.Cut()
	<-time.After(h.cfg.Lease + h.cfg.Lease/2) // the outage's length is the test's input
	if _, err := h.sup.Restart(context.Background(), id); err != nil {
		t.Fatalf("Restart during the outage: %v", err)
	}
	c := h.sync()[0]
	if c.PID != 0 && c.PID != before.PID {
		t.Errorf("a process was started for the slot while its lease had lapsed: %s", describe(c))
	}
	p.Refuse(false)
	now := h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != before.PID })
	if now.Restarts.LifetimeRestarts != 0 {
		t.Errorf("the restart counted: %s", describe(now))
	}
}

// TestResetAndRestartDuringAnOutageChangesNothing: fault explorer E46
// (redis-server seed 140767). An operator's reset+restart while Redis is
// away cannot start the worker (E32, E40): it was answered with that
// error, yet the reset was applied: the slot was left reset and held, and
// no one knew to start it again (invariant 4). Refused, it changes
// nothing: the crash history stays, and so does the stop it had.
func TestResetAndRestartDuringAnOutageChangesNothing(t *testing.T) {
	t.Parallel()
	h, srv := outageHarness(t, 1)
	id := ids("q", 1)[0]
	h.start()
	c := h.waitHealthy(id)[0]
	kill(t, c.PID)
	prev := c.PID
	h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != prev })
	ctx := context.Background()
	if _, err := h.sup.StopComponent(ctx, id); err != nil {
		t.Fatal(err)
	}
	before := h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusStopped && c.Held })
	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	if _, err := h.sup.Reset(ctx, id, true); !errors.Is(err, supervisor.ErrSlotMoving) {
		t.Fatalf("reset+restart while Redis is away: %v, want it refused (ErrSlotMoving)", err)
	}
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	c = h.get(id)
	if c.Reason != before.Reason || c.Restarts.LifetimeRestarts != before.Restarts.LifetimeRestarts || c.Status != health.StatusStopped || !c.Held {
		t.Errorf("after a refused reset+restart: %s; before: %s", describe(c), describe(before))
	}
}
