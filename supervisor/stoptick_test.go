package supervisor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestStopDuringATickOnADeadShard: a graceful Stop that comes while a tick
// waits on Redis returns within stop_timeout + 2 s (invariant 6 of issue
// 12). Fault explorer E24 (cluster seed 85008, four seeds at a time): a
// Cluster master was SIGKILLed as a host began its tick; the tick's calls
// to the dead node (refused dials, retried with backoff within the tick's
// budget of 5 op_timeouts) held the monitor, Stop's shutdown waited behind
// them, and Stop returned "context deadline exceeded" after 3.06 s
// (stop_timeout 1 s). Here the tick's read of the control hash is held
// until the node "dies" (its connections cut, new ones refused), and the
// client retries a refused call as long as its context lets it, as the
// Cluster client did (it reloads the slot map and tries again), with an
// op_timeout of 1 s: the tick alone could take 5 s.
func TestStopDuringATickOnADeadShard(t *testing.T) {
	t.Parallel()
	h, p, store := proxiedHarnessWith(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:      shortBackoff,
		Lease:       900 * time.Millisecond,
		StopTimeout: time.Second,
		OpTimeout:   time.Second,
	}, func(o *redis.Options) {
		o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 100, 100*time.Millisecond, 100*time.Millisecond
	})
	h.start()
	h.waitHealthy(ids("q", 1)...)
	control := store.Keys().Control()
	held, release := p.HoldReply(func(args []string) bool {
		return len(args) == 2 && strings.EqualFold(args[0], "HGETALL") && args[1] == control
	})
	defer release()
	select {
	case <-held: // a tick is in readControl
	case <-time.After(waitTimeout):
		t.Fatal("no tick read the control hash")
	}
	p.Refuse(true)
	p.Cut()
	limit := h.cfg.StopTimeout + 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit+5*time.Second)
	defer cancel()
	start := time.Now()
	err := h.sup.Stop(ctx)
	took := time.Since(start)
	if err != nil || took > limit {
		t.Fatalf("Stop during a tick on a dead node: %v after %s (limit %s)\n%s", err, took.Round(time.Millisecond), limit, h.logs.String())
	}
	t.Logf("Stop returned after %s", took.Round(time.Millisecond))
}

// TestStopWhileAShutdownTickWaits: fault explorer E31 (redis-server seed
// 93811, six seeds at a time). A host stopping gracefully renews, at its
// shutdown's ticks, the leases of the workers still stopping. Redis stopped
// answering during one such renewal, which the tick gave 5 op_timeouts: the
// monitor waited in it past stop_timeout, so the SIGKILL of a worker that
// did not stop on SIGTERM waited too, and Stop ran out of its stop_timeout
// + 2 s (invariant 6). A shutdown tick renews in one round trip: it waits
// one op_timeout at most. Here the renewal's reply is held and the worker
// ignores SIGTERM.
func TestStopWhileAShutdownTickWaits(t *testing.T) {
	t.Parallel()
	h, p, store := proxiedHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "ignore-term"}}},
		Policy:      longBackoff,
		Lease:       1500 * time.Millisecond,
		StopTimeout: time.Second,
		OpTimeout:   time.Second,
	})
	id := ids("q", 1)
	h.start()
	h.waitHealthy(id...)
	limit := h.cfg.StopTimeout + 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- h.sup.Stop(ctx) }()
	// Once the shutdown has begun (the worker is stopping), the next renewal
	// is a shutdown tick's.
	waitFor(t, store, id[0], isStatus(health.StatusStopping))
	slot := store.Keys().Slot(id[0])
	held, release := p.HoldReply(func(args []string) bool {
		return len(args) >= 4 && strings.EqualFold(args[0], "EVALSHA") && args[3] == slot
	})
	defer release()
	select {
	case <-held:
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) before a shutdown tick renewed a lease", err)
	case <-time.After(waitTimeout):
		t.Fatal("no shutdown tick renewed the lease")
	}
	var err error
	select {
	case err = <-stopped:
	case <-time.After(limit + 5*time.Second):
		t.Fatal("Stop never returned")
	}
	if took := time.Since(start); err != nil || took > limit {
		t.Fatalf("Stop with a shutdown tick waiting on Redis: %v after %s (limit %s)\n%s", err, took.Round(time.Millisecond), limit, h.logs.String())
	}
}

// A supervisor given a client that does not honour its calls' deadlines
// says so: its op_timeout would bound no call (E31).
func TestClientWithoutDeadlinesIsReported(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		opt.ContextTimeoutEnabled = on
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		logs := newLogSink()
		if _, err := supervisor.New(supervisor.Config{Host: "h", Logger: slog.New(slog.NewTextHandler(logs, nil))}, health.NewStore(rdb, env.Prefix, 0)); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "does not honour its calls' deadlines"); got == on {
			t.Errorf("ContextTimeoutEnabled %v: warned %v", on, got)
		}
	}
}

// TestStopDuringATickOnAPausedRedis: fault explorer E44 (redis-server seed
// 93811, on the code of E41). A host was stopped as Redis paused: its tick
// was waiting on a reply that did not come. Stop cancels the tick, but
// go-redis ends a read at its deadline only: the tick's call waited for
// the rest of the tick's budget (5 op_timeouts), then the shutdown wrote
// "stopping" (another op_timeout) before its SIGTERM, and Stop returned
// "context deadline exceeded" after 3.15 s (stop_timeout 1 s). Now each
// call of a tick has op_timeout of its own, and the workers get SIGTERM
// before their records are written. Here the tick's read of the control
// hash gets no reply, and nothing else is wrong with Redis.
func TestStopDuringATickOnAPausedRedis(t *testing.T) {
	t.Parallel()
	h, p, store := proxiedHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 2, Command: []string{testWorker, "beat"}}},
		Policy:      shortBackoff,
		Lease:       900 * time.Millisecond,
		StopTimeout: time.Second,
		OpTimeout:   time.Second, // the tick's budget: 5 s
	})
	h.start()
	h.waitHealthy(ids("q", 2)...)
	control := store.Keys().Control()
	held, release := p.HoldReply(func(args []string) bool {
		return len(args) == 2 && strings.EqualFold(args[0], "HGETALL") && args[1] == control
	})
	defer release()
	select {
	case <-held: // a tick is in readControl, its reply held
	case <-time.After(waitTimeout):
		t.Fatal("no tick read the control hash")
	}
	limit := h.cfg.StopTimeout + 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
	defer cancel()
	start := time.Now()
	err := h.sup.Stop(ctx)
	took := time.Since(start)
	if err != nil || took > limit {
		t.Fatalf("Stop during a tick waiting on a reply: %v after %s (limit %s)\n%s", err, took.Round(time.Millisecond), limit, h.logs.String())
	}
	t.Logf("Stop returned after %s", took.Round(time.Millisecond))
}
