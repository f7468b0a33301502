package chaos_test

import (
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// TestHostLoss is scenario 7: three hosts share one Redis and one pool;
// under load, one host process is SIGKILLed. Its workers shut down (their
// parent-death signal), its slots move to the two others as its leases
// expire, and no job is lost or in two handlers at once; the moves count
// no crash.
func TestHostLoss(t *testing.T) {
	need(t, modeLong)
	const q = "cluster"
	const workers = 6
	r := newRig(t, q)
	var hosts []*host
	specs := map[string]hostSpec{}
	for _, id := range []string{"a", "b", "c"} {
		spec := r.spec(id, poolSpec{Queue: q, Workers: workers, Concurrency: 2})
		spec.Lease, spec.StopTimeout, spec.Policy = time.Second, 3*time.Second, noLimits
		specs[id] = spec
		hosts = append(hosts, startHost(t, spec))
	}
	spread := func(want map[string]int) []health.Component {
		var cs []health.Component
		if !r.events.wait(60*time.Second, 200*time.Millisecond, func() bool {
			cs = r.records(slots(q, workers))
			got := map[string]int{}
			for _, c := range cs {
				if c.Status == health.StatusHealthy {
					got[c.Host]++
				}
			}
			for h, n := range want {
				if got[h] != n {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("slots not spread as %v: %s", want, describe(cs))
		}
		return cs
	}
	before := spread(map[string]int{"a": 2, "b": 2, "c": 2})
	tasks := r.enqueue(q, 1000, 50, 200)

	// Sample the processes: how often one slot runs in two processes (the
	// lost host's worker finishing its tasks while another host's worker
	// has the slot).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var samples, doubled int
	wg.Go(func() {
		for {
			per := map[string]int{}
			for _, comp := range workerProcs(r.ledger) {
				per[comp]++
			}
			samples++
			for _, n := range per {
				if n > 1 {
					doubled++
					break
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond): // sampling period
			}
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	if !r.events.wait(2*time.Minute, 50*time.Millisecond, func() bool { return r.ledger.done() >= len(tasks)/3 }) {
		t.Fatal("a third of the jobs did not complete")
	}
	lost := map[int]bool{}
	for _, c := range r.records(slots(q, workers)) {
		if c.Host == "c" {
			lost[c.PID] = true // ended with their host: a completion may repeat
		}
	}
	hosts[2].kill()
	killedAt := time.Now()
	after := spread(map[string]int{"a": 3, "b": 3})
	moved := time.Since(killedAt)
	r.waitDone(tasks, 3*time.Minute)
	close(stop)
	wg.Wait()
	r.waitAsynqSettled(q, len(tasks), 60*time.Second)
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(tasks, lost, nil)
	if tl.lost > 0 {
		t.Errorf("%d jobs lost", tl.lost)
	}
	for _, u := range tl.unexplained {
		t.Errorf("repeated completion: %s", u)
	}
	if n := lifetime(after); n != lifetime(before) {
		t.Errorf("restarts counted for moved slots: %d → %d", lifetime(before), n)
	}
	for _, h := range hosts[:2] {
		h.term(specs[h.spec.ID].StopTimeout + 5*time.Second)
	}
	result(t, "hosts=3 jobs=%d host_killed=1 (its workers %d) slots_moved_after=%s lost=%d duplicated=%d samples_with_a_slot_in_two_processes=%d/%d restarts_counted=0",
		len(tasks), len(lost), moved.Round(time.Millisecond), tl.lost, tl.duplicated, doubled, samples)
}
