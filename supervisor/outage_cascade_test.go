package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestCrashDuringOutageDoesNotCascadeToFailed (issue 12, defect 4,
// supervisor side; fault explorer E40): one worker crashes while Redis is
// away. Its crash is real and counted; no replacement starts until Redis
// answers (before E40 replacements started during the outage, each giving
// up at once for want of Redis, and a start the starting record could not
// reach Redis for could run beside another host's once this host's lease
// lapsed). The worker does not end failed, and it runs again once Redis is
// back.
func TestCrashDuringOutageDoesNotCascadeToFailed(t *testing.T) {
	t.Parallel()
	h, srv := serverHarness(t, supervisor.Config{
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
	i := h.logs.wait(t, mark, waitTimeout, "component="+id.String(), "start held")
	for j := mark; j <= i; j++ {
		if line := h.logs.line(j); strings.Contains(line, `msg="worker started"`) || strings.Contains(line, `msg="worker failed"`) {
			t.Errorf("during the outage: %s", line)
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
