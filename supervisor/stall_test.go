package supervisor_test

import (
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/faultproxy"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// stallHarness runs n beat workers of queue q (TTL 1 s) whose supervisor
// and workers reach the test's Redis through a fault proxy; the returned
// store reads Redis directly. Each Redis call of the monitor may take 3 s:
// a stall shorter than that fails no call.
func stallHarness(t testing.TB, n int) (*harness, *faultproxy.Proxy, *health.Store) {
	t.Helper()
	return proxiedHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		OpTimeout: 3 * time.Second,
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
	env := testredis.New(t)
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr = p.Addr()
	if opts != nil {
		opts(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	u.Host = p.Addr()
	h := newHarnessOn(t, rdb, u.String(), env.Prefix, cfg)
	return h, p, health.NewStore(env.Client, env.Prefix, 0)
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
