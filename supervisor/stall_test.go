package supervisor_test

import (
	"context"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/faultproxy"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// stallBeat is the heartbeat of the stall tests: a TTL of 2 s, so that a
// worker that must beat again within a TTL of grace after a stall is not
// judged hung when the machine starves it for a second (the -race suite on
// 2 loaded cores did that to a 1 s TTL: stop 29's CI). stallOpTimeout
// outlasts the stalls, which last up to one and a half TTLs: a stall shorter
// than it fails no call.
var stallBeat = supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 2 * time.Second}

const stallOpTimeout = 5 * time.Second

// stallHarness runs n beat workers of queue q (stallBeat) whose supervisor
// and workers reach the test's Redis through a fault proxy; the returned
// store reads Redis directly.
func stallHarness(t testing.TB, n int) (*harness, *faultproxy.Proxy, *health.Store) {
	t.Helper()
	return proxiedHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		Heartbeat: stallBeat,
		OpTimeout: stallOpTimeout,
	})
}

// proxiedHarness is a harness whose supervisor and workers reach the
// test's Redis through a fault proxy; the returned store reads Redis
// directly.
func proxiedHarness(t testing.TB, cfg supervisor.Config) (*harness, *faultproxy.Proxy, *health.Store) {
	t.Helper()
	return proxiedHarnessWith(t, cfg, nil)
}

// proxiedHarnessWith is proxiedHarness whose supervisor's client options
// are first changed by opts (if not nil).
func proxiedHarnessWith(t testing.TB, cfg supervisor.Config, opts func(*redis.Options)) (*harness, *faultproxy.Proxy, *health.Store) {
	t.Helper()
	h, p, _, direct := proxied(t, cfg, opts, false)
	return h, p, direct
}

// splitProxiedHarness is proxiedHarness with two proxies: sup carries the
// supervisor's calls, workers its workers'. A fault on one leaves the
// other alone.
func splitProxiedHarness(t testing.TB, cfg supervisor.Config) (h *harness, sup, workers *faultproxy.Proxy, direct *health.Store) {
	t.Helper()
	return proxied(t, cfg, nil, true)
}

func proxied(t testing.TB, cfg supervisor.Config, opts func(*redis.Options), split bool) (*harness, *faultproxy.Proxy, *faultproxy.Proxy, *health.Store) {
	t.Helper()
	env := testredis.New(t)
	newProxy := func() *faultproxy.Proxy { return testredis.ProxyTo(t, env.URL) }
	sup, workers := newProxy(), (*faultproxy.Proxy)(nil)
	if workers = sup; split {
		workers = newProxy()
	}
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr, opt.ContextTimeoutEnabled = sup.Addr(), true // as redisconn's clients (E31)
	if opts != nil {
		opts(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = workers.Addr()
	h := newHarnessOn(t, rdb, u.String(), env.Prefix, cfg)
	return h, sup, workers, health.NewStore(env.Client, env.Prefix, 0)
}

// TestRedisStallLongerThanTTLKillsNothing: Redis stops answering (paused,
// not refusing) for longer than the heartbeat TTL, and answers again before
// any call times out. The workers could not beat meanwhile: their keys
// expired. No worker is judged hung for it (fault explorer E14, seeds
// 10010, 10066, 40070); the grace starts when Redis answers again, and a
// worker that hangs after that is still found.
func TestRedisStallLongerThanTTLKillsNothing(t *testing.T) {
	t.Parallel()
	h, p, direct := stallHarness(t, 2)
	id := ids("q", 2)
	h.start()
	before := h.waitHealthy(id...)

	ev := newEventReader(t, direct)
	ttl := h.cfg.Heartbeat.TTL
	p.Stall(true)
	<-time.After(ttl + ttl/2) // the stall's length is the test's input
	p.Stall(false)
	ev.expectNone(2*ttl, notRunning)
	for i, c := range h.sync() {
		if c.Status != health.StatusHealthy || c.PID != before[i].PID || c.Restarts.RestartCount != 0 {
			t.Errorf("after the stall the monitor holds %s: %s; before: %s", id[i], describe(c), describe(before[i]))
		}
	}

	// The grace is one TTL from Redis's return, not forever.
	if err := syscall.Kill(before[0].PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	crashed := ev.waitEvent(id[0], func(w health.WorkerView) bool { return w.Status == string(health.StatusCrashed) })
	if crashed.Reason != "heartbeat expired" {
		t.Errorf("hung worker: %+v, want crashed for heartbeat expired", crashed)
	}
}

// TestTickHeldWhileWorkersCannotBeatKillsNothing: fault explorer E26 (seed
// 90310: two Redis pauses back to back). The monitor waits in a step of
// its tick (its read of the control hash, held), so it makes no other
// call, the pulse included, while the workers cannot reach Redis: their
// keys expire. Then the tick's reply comes and Redis answers the monitor
// at once, yet the window it could not watch is a stall like any other: no
// worker is judged hung for it (before the fix both were killed as hung
// and counted), and a worker that hangs after it is still found.
func TestTickHeldWhileWorkersCannotBeatKillsNothing(t *testing.T) {
	t.Parallel()
	h, sup, workers, direct := splitProxiedHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 2, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		Heartbeat: stallBeat,
		OpTimeout: stallOpTimeout, // the tick's read is held for more than a TTL
	})
	id := ids("q", 2)
	h.start()
	before := h.waitHealthy(id...)
	ev := newEventReader(t, direct)

	control := direct.Keys().Control()
	held, release := sup.HoldReply(func(args []string) bool {
		return len(args) == 2 && strings.EqualFold(args[0], "HGETALL") && args[1] == control
	})
	defer release()
	select {
	case <-held: // a tick waits in readControl
	case <-time.After(waitTimeout):
		t.Fatal("no tick read the control hash")
	}
	workers.Stall(true)
	defer workers.Stall(false)
	waitKeysGone(t, direct, id)
	release()
	// The grace is a TTL from the tick's reply; the workers beat again
	// before it ends (with three quarters of it left to get through).
	ttl := h.cfg.Heartbeat.TTL
	ev.expectNone(ttl/4, notRunning)
	workers.Stall(false)
	ev.expectNone(2*ttl, notRunning)
	for i, c := range h.sync() {
		if c.Status != health.StatusHealthy || c.PID != before[i].PID || c.Restarts.RestartCount != 0 {
			t.Errorf("after the held tick the monitor holds %s: %s; before: %s", id[i], describe(c), describe(before[i]))
		}
	}
	if !strings.Contains(h.logs.String(), "the monitor waited on redis") {
		t.Error("the held tick was not taken for a window the monitor could not watch")
	}

	if err := syscall.Kill(before[0].PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	crashed := ev.waitEvent(id[0], func(w health.WorkerView) bool { return w.Status == string(health.StatusCrashed) })
	if crashed.Reason != "heartbeat expired" {
		t.Errorf("hung worker: %+v, want crashed for heartbeat expired", crashed)
	}
}

// waitKeysGone returns once the heartbeat keys of ids have all expired.
func waitKeysGone(t testing.TB, direct *health.Store, ids []health.ComponentID) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		probes, err := direct.ProbeMany(ctx, ids)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		gone := 0
		for _, p := range probes {
			if p.TTL <= 0 {
				gone++
			}
		}
		if gone == len(ids) {
			return
		}
		select {
		case <-tick.C:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("heartbeat keys of %v still there after %s", ids, waitTimeout)
		}
	}
}

// TestSlowTickStepStillJudgesHangs: a tick step that takes longer than
// slow only because it makes many calls, or runs the leader's statistics
// source (which reads every record: it grows with the cluster), while
// Redis answers each call at once, is not a stall. With every tick's
// leader step longer than slow, counting each as a stall of every shard
// (the E26 fix, 685defb) moved the grace a TTL past every tick: with the
// ticks closer than a TTL (the defaults: 5 s against 30 s), no heartbeat
// was ever judged and a hung worker ran for good.
func TestSlowTickStepStillJudgesHangs(t *testing.T) {
	t.Parallel()
	const statsTake = 700 * time.Millisecond // > slow: min((TTL − interval)/3, OpTimeout/2) = 500 ms
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "hang"}}},
		Policy:    longBackoff,
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 2 * time.Second},
		Lease:     3 * time.Second, // a tick a second: closer than a TTL
		Stats: func(ctx context.Context, _ []string) (map[string]any, error) {
			select { // the statistics source's time is the test's input
			case <-time.After(statsTake):
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	id := health.ComponentID{Queue: "q"}
	ev := newEventReader(t, h.store)
	h.start()
	h.waitFor(id, isStatus(health.StatusHealthy))
	crashed := ev.waitForWithin(h.store, id, isStatus(health.StatusCrashed), 3*h.cfg.Heartbeat.TTL+waitTimeout/3)
	if crashed.Reason != "heartbeat expired" {
		t.Errorf("hung worker: %s, want crashed for heartbeat expired", describe(crashed))
	}
}

// TestLostRenewalAfterALapseCountsNoCrash: fault explorer E59 (seed
// 247078). A renewal sent just before Redis stopped answering timed out,
// and Redis ran it only after the outage, once the lease had lapsed (and,
// in the seed, been another host's, whose takeover stopped our process):
// it took the lease again, and its reply was lost. The next renewal found
// the lease this host's, and the exit seen during the outage was judged a
// crash of a hold that looked unbroken: a restart counted with no crash
// (invariant 5). A lease found this host's after more than a lease without
// a renewal is now judged as taken again: the exit is not counted.
func TestLostRenewalAfterALapseCountsNoCrash(t *testing.T) {
	t.Parallel()
	h, sup, direct, id, key := lapseHarness(t)
	ctx := context.Background()
	h.start()
	before := h.waitHealthy(id)[0]
	mark := h.logs.mark()
	sup.Stall(true) // the supervisor's Redis answers nothing (the workers' does)
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	kill(t, before.PID)
	h.logs.wait(t, mark, waitTimeout, "component="+id.String(), "worker exited while Redis is away")
	waitLapsed(t, direct, key)
	// What the renewal Redis ran late did: the lapsed lease is this
	// host's again, for a client that gave up on the reply.
	if err := direct.Client().Set(ctx, key, health.LeaseValue(before.Host, before.Instance), clusterLease).Err(); err != nil {
		t.Fatal(err)
	}
	sup.Stall(false)
	i := h.logs.waitAny(t, mark, waitTimeout, `msg="worker crashed"`, "not counted")
	if line := h.logs.line(i); !strings.Contains(line, "not counted") {
		t.Errorf("the exit during the outage was counted: %s", line)
	}
	c := h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != before.PID })
	if c.Restarts.RestartCount != 0 || c.Restarts.LifetimeRestarts != 0 {
		t.Errorf("%s after the outage: %s, want no restart counted", id, describe(c))
	}
}

// TestLapsedLeaseTakenBackRewritesAnotherHostsRecord: fault explorer E60
// (seed 247251). An operator stopped a worker; its host was then cut from
// Redis for longer than a lease, and another host took the slot, ran it
// and gave it up (a rebalance), leaving its own record: stopped for a
// rebalance, on that host. The first host's renewal took the lapsed lease
// back, and its worker stayed stopped by the operator under the other
// host's record: a stopped slot no host would start, whose record said
// nothing of why (invariant 4). The record is now written again from the
// lease holder's state.
func TestLapsedLeaseTakenBackRewritesAnotherHostsRecord(t *testing.T) {
	t.Parallel()
	h, sup, direct, id, key := lapseHarness(t)
	ctx := context.Background()
	h.start()
	h.waitHealthy(id)
	stopped, err := h.sup.StopComponent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	mark := h.logs.mark()
	sup.Stall(true)
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	waitLapsed(t, direct, key)
	// Another host held the slot meanwhile and gave it up.
	other := stopped
	other.Host, other.Instance, other.Reason, other.PID, other.Held = "h2", "other", "rebalance", 0, false
	if _, err := direct.Write(ctx, other, health.Write{NoCheck: true}); err != nil {
		t.Fatal(err)
	}
	sup.Stall(false)
	c := waitFor(t, direct, id, func(c health.Component) bool { return c.Instance == stopped.Instance })
	if c.Host != stopped.Host || c.Status != health.StatusStopped || c.Reason != stopped.Reason {
		t.Errorf("%s after the lease was taken back: %s; stopped by the operator: %s", id, describe(c), describe(stopped))
	}
	if held, err := direct.LeaseHolders(ctx, []string{key}); err != nil || health.LeaseHost(held[0]) != stopped.Host {
		t.Errorf("lease of %s: %q, %v; want %s's", id, held, err, stopped.Host)
	}
}

// waitLapsed waits until the lease at key has expired (on Redis's clock).
func waitLapsed(t *testing.T, store *health.Store, key string) {
	t.Helper()
	for deadline := time.Now().Add(4 * clusterLease); ; {
		n, err := store.Client().Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease did not lapse")
		}
		<-time.After(10 * time.Millisecond) // polling the lease's expiry, on Redis's clock
	}
}

// lapseHarness is one beat worker whose supervisor reaches Redis through
// a proxy of its own (sup), with a short lease: the tests of a lease that
// lapses while that proxy stalls. It returns the slot and its lease's key.
func lapseHarness(t *testing.T) (h *harness, sup *faultproxy.Proxy, direct *health.Store, id health.ComponentID, key string) {
	t.Helper()
	h, sup, _, direct = splitProxiedHarness(t, supervisor.Config{
		Lease: clusterLease, OpTimeout: 200 * time.Millisecond,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	id = ids("q", 1)[0]
	return h, sup, direct, id, direct.Keys().Slot(id)
}
