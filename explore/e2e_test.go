package explore

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A seed with its faults taken out breaks nothing: the checks do not fire
// on a quiet cluster (the explorer's own false positives would show here).
func TestQuietSeed(t *testing.T) {
	var r Result
	for try := 1; ; try++ {
		r = RunSeed(42, Options{Backend: BackendMini, Out: os.Stdout, Only: []int{}, LogDir: t.TempDir()}, shared)
		if !r.Failed() {
			break
		}
		if !r.Overloaded {
			t.Fatalf("a seed with no fault failed:\n%s", r.Report())
		}
		// The timings are real and short: a machine too busy breaks them
		// by itself (a heartbeat a second late is a hang).
		t.Logf("try %d failed on an overloaded machine (%s):\n%s", try, r.Load, r.Report())
		if try == 3 {
			t.Skip("the machine stayed too busy to judge a quiet seed")
		}
	}
	if r.Jobs.Enqueued == 0 || r.Jobs.Completed != r.Jobs.Enqueued {
		t.Fatalf("jobs %+v: every job of a quiet seed completes", r.Jobs)
	}
}

// A worker process with no supervisor is caught once it outlives
// stop_timeout + 1 s (invariant 2): a stand-in for an orphan, started by
// the explorer itself with a worker's environment.
func TestOrphanCaught(t *testing.T) {
	plan := Draw(42, BackendMini).Only([]int{})
	w, err := newWorld(plan, Options{Backend: BackendMini, Out: os.Stdout, LogDir: t.TempDir()}, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(w.dir)
	defer w.teardown()
	if err := w.setup(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.sampler(stop)
	}()
	defer func() {
		close(stop)
		<-done
	}()
	rogue := exec.Command("sleep", "60")
	rogue.Env = append(os.Environ(), "VIGIL_COMPONENT=worker:a:0", "VIGIL_HOST=h0", "VIGIL_PREFIX="+w.pfx)
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = rogue.Process.Kill()
		_ = rogue.Wait()
	}()
	deadline := time.Now().Add(orphanLimit + 5*time.Second)
	for time.Now().Before(deadline) {
		for _, v := range w.v.all() {
			if v.Invariant == 2 && strings.Contains(v.Evidence, "orphan worker pid") {
				return
			}
		}
		time.Sleep(SampleEvery) // the sampler's pace
	}
	t.Fatalf("no orphan reported; violations: %v", w.v.all())
}

// A goroutine a host leaves behind after Stop is caught (invariant 8).
func TestLeakCaught(t *testing.T) {
	r := RunSeed(42, Options{Backend: BackendMini, Out: os.Stdout, Only: []int{}, LogDir: t.TempDir(),
		HostEnv: []string{"VIGILHOST_TEST_LEAK=1"}}, shared)
	for _, v := range r.Violations {
		if v.Invariant == 8 && strings.Contains(v.Evidence, "goroutines left after Stop") {
			return
		}
	}
	t.Fatalf("no leak reported:\n%s", r.Report())
}
