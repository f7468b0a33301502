package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/supervisor"
)

// TestSlowAdoptionKeepsItsLeases: a host that takes many slots at once
// (its first tick, or a lost host's share) on a slow link spends a while
// starting their workers, two round trips or more each. Its leases are
// renewed at the start of a tick: a tick that spent longer than a lease
// adopting let the leases it took first lapse, for any host to take (here
// the host takes them back, logging "slot lease was gone"). A tick adopts
// no more than fits in a sixth of a lease, and the next one follows at
// once.
func TestSlowAdoptionKeepsItsLeases(t *testing.T) {
	t.Parallel()
	const n = 40
	h, p, _ := proxiedHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy:      longBackoff,
		Lease:       1200 * time.Millisecond,
		MaxPoolSize: n,
	})
	// 10 ms a round trip: starting 40 workers takes 40 x (2 round trips
	// and a fork), longer than the lease (2 s here before the fix).
	p.Delay(10 * time.Millisecond)
	h.start()
	h.waitHealthy(ids("q", n)...)
	// Every worker healthy: adopted. The ticks of the lease after it
	// renew every lease once more; a lapse is logged at the renewal.
	end := time.After(1200 * time.Millisecond)
	for {
		if logs := h.logs.String(); strings.Contains(logs, "slot lease was gone") || strings.Contains(logs, "slot lease lost") {
			t.Fatalf("a lease lapsed while the host adopted its slots:\n%s", logs)
		}
		select {
		case <-end:
			return
		case <-time.After(50 * time.Millisecond): // reading the log, not waiting for a goroutine
		}
	}
}
