package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
