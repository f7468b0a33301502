package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
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
	// The lease is long enough that a loaded machine (make test runs
	// packages and tests side by side) does not delay three ticks in a row
	// past it: with 1.2 s, a renewal 1.213 s after the last one failed the
	// test once, all workers healthy, adopted in time.
	const n, lease = 40, 3 * time.Second
	h, p, _ := proxiedHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy:      longBackoff,
		Lease:       lease,
		MaxPoolSize: n,
		// The subject is the leases, not the heartbeats: with the harness's
		// 1 s TTL, a worker starved of CPU for a second on a loaded machine
		// (CI ran it beside other packages; 6 CPU burners on 2 cores
		// reproduced it) was judged hung, and longBackoff kept it down past
		// the wait below.
		Heartbeat: supervisor.Heartbeat{Interval: 250 * time.Millisecond, TTL: 5 * time.Second},
	})
	// 25 ms a round trip: starting 40 workers takes 40 x (2 round trips
	// and a fork), longer than the lease (5 s here without the budget).
	p.Delay(25 * time.Millisecond)
	h.start()
	// Adoption takes about 12 s on a quiet machine (the budget spreads it
	// over many ticks); a loaded one takes longer than waitFor's 15 s.
	for _, id := range ids("q", n) {
		waitForWithin(t, h.store, id, isStatus(health.StatusHealthy), time.Minute)
	}
	p.Delay(0) // what follows is about the ticks, not the link
	// Every worker healthy: adopted. The ticks of the lease after it
	// renew every lease once more; a lapse is logged at the renewal.
	end := time.After(lease)
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
