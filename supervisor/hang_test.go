package supervisor_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestHangDetectedAmongLiveKeys: on a real Redis holding 1,000 other live
// TTL keys, where Redis itself would announce an expiry seconds late
// (docs/design.md §9), a hung worker is marked crashed within a generous bound
// of the moment its heartbeat key expires, because the monitor reads the
// key at its deadline.
func TestHangDetectedAmongLiveKeys(t *testing.T) {
	t.Parallel()
	env := testredis.NewReal(t)
	const (
		ttl      = 2 * time.Second
		bound    = 1500 * time.Millisecond
		liveKeys = 1000
	)

	// 1,000 live keys under the test's prefix, kept alive by a goroutine.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	refresh := func() error {
		pipe := env.Client.Pipeline()
		for i := range liveKeys {
			pipe.Set(ctx, env.Prefix+"load:"+strconv.Itoa(i), "x", time.Second)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	if err := refresh(); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := refresh(); err != nil && ctx.Err() == nil {
					t.Errorf("refresh live keys: %v", err)
					return
				}
			}
		}
	})
	defer wg.Wait()
	defer cancel()

	h := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "hang"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 500 * time.Millisecond, TTL: ttl},
		Policy:    longBackoff,
	})
	id := health.ComponentID{Queue: "q"}
	ev := newEventReader(t, h.store)
	h.start()
	beat := h.waitFor(id, isStatus(health.StatusHealthy)).LastHeartbeat
	crashed := ev.waitEvent(id, func(w health.WorkerView) bool { return w.Status == string(health.StatusCrashed) })
	seen := time.Now()
	if crashed.ExitCode == nil || *crashed.ExitCode != health.ExitHeartbeatTimeout || crashed.Reason != "heartbeat expired" {
		t.Errorf("crash: %+v, want exit_code -2, heartbeat expired", crashed)
	}
	expiry := beat.Add(ttl)
	recorded := time.UnixMilli(crashed.UpdatedAt)
	overshoot := recorded.Sub(expiry)
	t.Logf("hung worker marked crashed %v after its heartbeat key expired (seen by the test after %v; bound %v)",
		overshoot, seen.Sub(expiry).Round(time.Millisecond), bound)
	if overshoot < 0 || overshoot > bound {
		t.Errorf("crashed %v after the key's expiry, want within [0, %v]", overshoot, bound)
	}
	if n, err := env.Client.Exists(context.Background(), env.Prefix+"load:0").Result(); err != nil || n != 1 {
		t.Errorf("live keys not alive during the test: exists %d, %v", n, err)
	}
}
