package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestCrashDuringOutageDoesNotCascadeToFailed (issue 12, defect 4,
// supervisor side): one worker crashes while Redis is away; each
// replacement started during the outage gives up at once for want of
// Redis. Only the first crash is real: the replacements' exits are not
// counted, the worker does not end failed, and it runs again once Redis
// is back.
func TestCrashDuringOutageDoesNotCascadeToFailed(t *testing.T) {
	t.Parallel()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHarnessOn(t, rdb, srv.URL, "vigil:", supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "needredis"}}},
		// Three counted crashes in the window make it failed.
		Policy: policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, MaxInWindow: 3},
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	first := h.waitFor(id, isStatus(health.StatusHealthy))

	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")
	kill(t, first.PID)
	// Wait for four replacements to have started and given up (or for the
	// worker to fail, which is the defect).
	for n := 0; n < 4; n++ {
		i := h.logs.wait(t, mark, waitTimeout, "component="+id.String(), "worker ")
		line := h.logs.line(i)
		mark = i + 1
		switch {
		case strings.Contains(line, `msg="worker failed"`):
			t.Errorf("the worker failed during the outage: %s", line)
			n = 4
		case !strings.Contains(line, `msg="worker crashed"`):
			n--
		}
	}
	mark = h.logs.mark()
	srv.Start()
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	c := h.waitFor(id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy || c.Status == health.StatusFailed
	})
	if c.Status != health.StatusHealthy || c.Restarts.LifetimeRestarts != 1 || len(c.Restarts.Crashes) != 1 {
		t.Errorf("after the outage: %s, want healthy with the one real crash counted", describe(c))
	}
}
