package chaos_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// TestGracefulShutdown is scenario 8: SIGTERM to `vigil serve` while every
// worker runs jobs. It exits 0 within stop_timeout + 2 s; each job in
// flight either finished or is back in pending (none left active); no
// crash is recorded and every worker ends stopped ("host shutdown", not
// held). Started again, the host completes every job, none twice.
func TestGracefulShutdown(t *testing.T) {
	need(t, modeLong)
	const q = "graceful"
	const workers = 4
	r := newRig(t, q)
	spec := r.spec("h1", poolSpec{Queue: q, Workers: workers, Concurrency: 2})
	spec.StopTimeout = 3 * time.Second // VIGIL_SHUTDOWN_TIMEOUT 2 s
	h := startHost(t, spec)
	r.waitHealthy(slots(q, workers), 30*time.Second)
	tasks := r.enqueue(q, 100, 100, 4000)
	if !r.events.wait(30*time.Second, 20*time.Millisecond, func() bool { return len(r.ledger.owners()) >= workers*2 }) {
		t.Fatal("the pool never ran a job in every slot")
	}
	inFlight := r.ledger.owners()
	begin := time.Now()
	code := h.term(spec.StopTimeout + 2*time.Second)
	took := time.Since(begin)
	if code != 0 {
		t.Errorf("vigil serve exited with %d after SIGTERM, want 0", code)
	}
	if n := len(workerProcs(r.ledger)); n > 0 {
		t.Errorf("%d worker processes still run after the host exited", n)
	}
	info, err := r.insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	comp := r.ledger.completions()
	handedBack := 0
	for id := range inFlight {
		ti, err := r.insp.GetTaskInfo(q, id)
		switch {
		case err != nil:
			t.Errorf("task %s: %v", id, err)
		case comp[id] > 0:
		case ti.State.String() == "pending":
			handedBack++
		default:
			t.Errorf("task %s, in flight at the SIGTERM, is %s and not completed", id, ti.State)
		}
	}
	if info.Active != 0 || info.Completed+info.Pending != len(tasks) || info.Retry+info.Archived != 0 {
		t.Errorf("queue after the shutdown: %+v (want none active, completed + pending = %d)", info, len(tasks))
	}
	for _, c := range r.records(slots(q, workers)) {
		if c.Status != health.StatusStopped || c.Reason != "host shutdown" || c.Held {
			t.Errorf("%s after the shutdown: %s %q held=%v", c.ID, c.Status, c.Reason, c.Held)
		}
	}
	if n := len(r.events.workers(statusIs(health.StatusCrashed))); n > 0 {
		t.Errorf("%d crashed records written", n)
	}
	aborted := 0
	r.events.wait(5*time.Second, 500*time.Millisecond, func() bool {
		aborted = len(r.events.jobs(queue.StateAbortedShutdown))
		return aborted >= handedBack
	})
	if aborted != handedBack {
		t.Errorf("%d aborted:shutdown events for %d tasks handed back", aborted, handedBack)
	}

	h2 := startHost(t, spec)
	r.waitDone(tasks, 2*time.Minute)
	r.waitAsynqSettled(q, len(tasks), 30*time.Second)
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(tasks, nil, nil)
	if tl.lost > 0 || tl.duplicated > 0 {
		t.Errorf("lost %d, duplicated %d: %v", tl.lost, tl.duplicated, tl.unexplained)
	}
	h2.term(spec.StopTimeout + 5*time.Second)
	result(t, "jobs=%d in_flight_at_sigterm=%d finished=%d handed_back=%d exit=%d after %s (limit %s) crashed_records=0 lost=%d duplicated=%d",
		len(tasks), len(inFlight), len(inFlight)-handedBack, handedBack, code, took.Round(time.Millisecond), spec.StopTimeout+2*time.Second, tl.lost, tl.duplicated)
}
