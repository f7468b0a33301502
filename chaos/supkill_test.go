package chaos_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// TestSupervisorKill is scenario 6: `vigil serve` is SIGKILLed with jobs in
// flight and started again with the same host id. No child of the old
// process still runs VIGIL_SHUTDOWN_TIMEOUT + 1 s after the kill (by pid
// list, zombies excluded); the new one reconciles the records (new
// processes, restart history kept and not increased), and every job
// completes, none lost, none in two handlers at once.
func TestSupervisorKill(t *testing.T) {
	need(t, modeShort)
	const q = "sk"
	const workers = 4
	r := newRig(t, q)
	spec := r.spec("h1", poolSpec{Queue: q, Workers: workers, Concurrency: 2})
	spec.Policy = noLimits
	spec.StopTimeout = 3 * time.Second // VIGIL_SHUTDOWN_TIMEOUT 2 s
	shutdownTimeout := spec.StopTimeout - time.Second
	h := startHost(t, spec)
	first := r.waitHealthy(slots(q, workers), 30*time.Second)

	// A restart history that the reconcile must keep and not add to.
	killed := map[int]bool{first[0].PID: true}
	sigkill(t, first[0].PID)
	before := r.waitHealthy(slots(q, workers), 30*time.Second, killed)
	// Jobs of 0.2–4 s (2.5 s short): at the kill, some finish within the
	// shutdown timeout, the others are handed back.
	tasks := r.enqueue(q, pick(24, 200), 200, pick(2500, 4000))
	if !r.events.wait(30*time.Second, 20*time.Millisecond, func() bool { return len(r.ledger.owners()) >= workers*2 }) {
		t.Fatal("the pool never ran a job in every slot")
	}
	old := workerProcs(r.ledger)
	inFlight := len(r.ledger.owners())
	h.kill()
	killedAt := time.Now()

	// Every child of the dead supervisor goes (its parent-death signal
	// makes it shut down gracefully) within VIGIL_SHUTDOWN_TIMEOUT + 1 s.
	limit := shutdownTimeout + time.Second
	var last time.Time
	r.events.wait(limit, 10*time.Millisecond, func() bool {
		for pid := range old {
			if running(pid) {
				return false
			}
		}
		last = time.Now()
		return true
	})
	orphans := 0
	for pid, comp := range old {
		if running(pid) {
			orphans++
			t.Errorf("%s: process %d still runs %s after its supervisor was SIGKILLed", comp, pid, limit)
			sigkill(t, pid)
		}
		killed[pid] = true // ended with their supervisor: a completion may repeat
	}

	h2 := startHost(t, spec)
	after := r.waitHealthy(slots(q, workers), 30*time.Second)
	for i, c := range after {
		b := before[i]
		if old[c.PID] != "" || c.Instance == b.Instance || c.Host != "h1" {
			t.Errorf("%s after the restart: pid %d instance %q (before %d %q)", c.ID, c.PID, c.Instance, b.PID, b.Instance)
		}
		if c.Restarts.LifetimeRestarts != b.Restarts.LifetimeRestarts || c.Restarts.RestartCount != b.Restarts.RestartCount {
			t.Errorf("%s: restarts %d/%d before the kill, %d/%d after the reconcile", c.ID,
				b.Restarts.RestartCount, b.Restarts.LifetimeRestarts, c.Restarts.RestartCount, c.Restarts.LifetimeRestarts)
		}
	}
	r.waitDone(tasks, pick(60*time.Second, 3*time.Minute))
	r.waitAsynqSettled(q, len(tasks), 30*time.Second)
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(tasks, killed, nil)
	if tl.lost > 0 {
		t.Errorf("%d jobs lost", tl.lost)
	}
	for _, u := range tl.unexplained {
		t.Errorf("repeated completion: %s", u)
	}
	if n := r.retried(q); n > 0 {
		t.Errorf("%d tasks retried by asynq: left to its lease recovery", n)
	}
	var reconciled int
	for _, w := range r.events.workers(statusIs(health.StatusCrashed)) {
		if w.Reason == "supervisor restart" {
			reconciled++
		}
	}
	aborted, requeued := 0, 0
	for _, e := range r.events.all() {
		if e.job != nil && e.at.After(killedAt) {
			switch e.job.State {
			case queue.StateAbortedShutdown:
				aborted++
			case queue.StateRequeuedStale:
				requeued++
			}
		}
	}
	if requeued > 0 {
		t.Errorf("the new host had to requeue %d tasks of the old workers: they did not finish or hand back their tasks themselves", requeued)
	}
	h2.term(spec.StopTimeout + 5*time.Second)
	result(t, "jobs=%d in_flight_at_kill=%d children=%d orphans=%d gone_after=%s (limit %s) reconciled=%d handed_back_by_workers=%d requeued_by_new_host=%d lost=%d duplicated=%d restarts_counted_by_reconcile=0",
		len(tasks), inFlight, len(old), orphans, last.Sub(killedAt).Round(time.Millisecond), limit, reconciled, aborted, requeued, tl.lost, tl.duplicated)
}
