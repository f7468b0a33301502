package chaos_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// TestHang is scenario 2: a worker holding a job is frozen with SIGSTOP.
// Its heartbeat expires: the supervisor kills it (exit code -2, one
// counted restart) about a TTL after its last beat and starts another,
// and the job it held completes in another process, once; every other
// job completes too.
func TestHang(t *testing.T) {
	need(t, modeLong)
	const q = "hang"
	const workers = 3
	r := newRig(t, q)
	spec := r.spec("h1", poolSpec{Queue: q, Workers: workers})
	spec.Interval, spec.TTL = 200*time.Millisecond, 2*time.Second
	spec.Policy = noLimits
	h := startHost(t, spec)
	r.waitHealthy(slots(q, workers), 30*time.Second)

	long := r.enqueue(q, 1, 5000, 5000)[0]
	var holder int
	if !r.events.wait(30*time.Second, 20*time.Millisecond, func() bool { holder = r.ledger.owners()[long]; return holder > 0 }) {
		t.Fatal("the long job never started")
	}
	others := r.enqueue(q, 200, 20, 80)
	if err := syscall.Kill(holder, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()

	var crash health.WorkerView
	if !r.events.wait(4*spec.TTL+10*time.Second, time.Second, func() bool {
		for _, w := range r.events.workers(statusIs(health.StatusCrashed)) {
			if w.PID == holder {
				crash = w
				return true
			}
		}
		return false
	}) {
		t.Fatalf("frozen worker %d not judged hung", holder)
	}
	detected := time.Since(stopped)
	if crash.ExitCode == nil || *crash.ExitCode != health.ExitHeartbeatTimeout || crash.Reason != "heartbeat expired" {
		t.Errorf("crash of the frozen worker: %+v", crash)
	}
	// Its last beat was at most an interval before the SIGSTOP: it is
	// judged a TTL after that beat.
	if detected < spec.TTL-spec.Interval || detected > spec.TTL+time.Second {
		t.Errorf("judged hung %s after the SIGSTOP, want about the TTL (%s)", detected, spec.TTL)
	}
	if running(holder) {
		t.Errorf("frozen worker %d still there", holder)
	}
	all := append([]string{long}, others...)
	r.waitDone(all, 60*time.Second)
	cs := r.waitHealthy(slots(q, workers), 30*time.Second, map[int]bool{holder: true})
	r.waitAsynqSettled(q, len(all), 30*time.Second)
	if by := r.ledger.completers()[long]; len(by) != 1 || by[0] == holder {
		t.Errorf("the held job was completed by %v (frozen worker %d)", by, holder)
	}
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(all, map[int]bool{holder: true}, nil)
	if tl.lost > 0 || len(tl.unexplained) > 0 {
		t.Errorf("lost %d, unexplained repeats %v", tl.lost, tl.unexplained)
	}
	if n := lifetime(cs); n != 1 {
		t.Errorf("%d restarts counted for one hang: %s", n, describe(cs))
	}
	h.term(spec.StopTimeout + 5*time.Second)
	result(t, "jobs=%d hung=1 judged_after=%s (ttl %s) exit_code=-2 held_job_completed_elsewhere=1 lost=%d duplicated=%d restarts_counted=%d",
		len(all), detected.Round(time.Millisecond), spec.TTL, tl.lost, tl.duplicated, lifetime(cs))
}
