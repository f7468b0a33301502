package chaos_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// TestWorkerKills is scenario 1: jobs flow through a pool while a random
// worker process is SIGKILLed every 200–500 ms. Every job completes (by
// the ledger), no task is ever in two handlers at once, a job completes
// more than once only when a killed process had completed it first,
// every task was requeued at once (none left to asynq's lease recovery),
// the restart counters in Redis add up to the kills, and no worker is
// left crashed.
func TestWorkerKills(t *testing.T) {
	m := need(t, modeShort)
	jobs, workers := 1000, 8
	lo, hi := 100, 300
	if m == modeShort {
		jobs, workers, lo, hi = 300, 4, 50, 150
	}
	const q = "kills"
	r := newRig(t, q)
	tasks := r.enqueue(q, jobs, lo, hi)
	spec := r.spec("h1", poolSpec{Queue: q, Workers: workers, Concurrency: 2})
	spec.Policy = noLimits
	begin := time.Now()
	h := startHost(t, spec)

	killed := map[int]bool{}
	deadline := time.Now().Add(pick(90*time.Second, 5*time.Minute))
	for r.ledger.done() < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d jobs completed, %d kills", time.Since(begin), r.ledger.done(), jobs, len(killed))
		}
		// The kill cadence is the scenario's input: wall time passing.
		<-time.After(time.Duration(200+rand.IntN(301)) * time.Millisecond)
		var live []int
		for pid := range workerProcs(r.ledger) {
			live = append(live, pid)
		}
		if len(live) == 0 {
			continue
		}
		if pid := live[rand.IntN(len(live))]; sigkill(t, pid) {
			killed[pid] = true
		}
	}
	elapsed := time.Since(begin)
	kills := len(killed)

	cs := r.waitHealthy(slots(q, workers), 30*time.Second, killed)
	info := r.waitAsynqSettled(q, jobs, 30*time.Second)
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("%d tasks ran in two handlers at once: %v", len(v), v)
	}
	tl := r.ledger.judge(tasks, killed, nil)
	if tl.lost > 0 {
		t.Errorf("%d jobs lost", tl.lost)
	}
	for _, u := range tl.unexplained {
		t.Errorf("repeated completion with no killed process to explain it: %s", u)
	}
	if n := r.retried(q); n > 0 {
		t.Errorf("%d tasks retried by asynq: a killed worker's task was left to asynq's lease recovery", n)
	}
	if info.Archived+info.Failed > 0 {
		t.Errorf("asynq archived %d, failed %d", info.Archived, info.Failed)
	}
	if got := lifetime(cs); got != kills {
		t.Errorf("restart counters add up to %d, want %d (the kills): %s", got, kills, describe(cs))
	}
	crashed := 0
	r.events.wait(10*time.Second, time.Second, func() bool {
		crashed = len(r.events.workers(statusIs(health.StatusCrashed)))
		return crashed >= kills
	})
	if crashed != kills {
		t.Errorf("%d crashed events for %d kills", crashed, kills)
	}
	if n := len(r.events.workers(statusIs(health.StatusFailed))); n > 0 {
		t.Errorf("%d failed events", n)
	}
	requeued := len(r.events.jobs("requeued:stale"))
	h.term(spec.StopTimeout + 5*time.Second)
	result(t, "jobs=%d workers=%d×2 kills=%d lost=%d duplicated=%d (all after a kill) requeued_at_once=%d violations=%d restarts_counted=%d in %s",
		jobs, workers, kills, tl.lost, tl.duplicated, requeued, len(r.ledger.violations()), lifetime(cs), elapsed.Round(time.Millisecond))
}
