package supervisor_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// recorder is a Recoverer that records what it is asked to put back.
type recorder struct {
	mu    sync.Mutex
	calls []recovered
}

type recovered struct {
	id      health.ComponentID
	pid     int
	crashed bool
}

func (r *recorder) Recover(_ context.Context, id health.ComponentID, pid int, crashed bool) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, recovered{id, pid, crashed})
	return 0, nil
}

func (r *recorder) asked() []recovered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recovered(nil), r.calls...)
}

// TestCleanExitAfterStopRecoversTasks (issue 12, defect 9): a worker that
// exits 0 after a graceful stop may still have left tasks marked running
// (it died on the way out, or lied): the supervisor asks for them back
// under that pid as after any other exit (it is idempotent and scoped to
// the pid). It did not crash: no crash is counted against those tasks
// (fault explorer E45).
func TestCleanExitAfterStopRecoversTasks(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		Recoverer: rec,
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	c, err := h.sup.StopComponent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitCode != 0 || c.Status != health.StatusStopped {
		t.Fatalf("after the stop: %s", describe(c))
	}
	want := recovered{id, pid, false}
	for _, r := range rec.asked() {
		if r == want {
			return
		}
	}
	t.Errorf("asked to recover %v after a clean stop of %d, want %v", rec.asked(), pid, want)
}

// TestViolentExitDuringAStopCountsAgainstTheTasks: a process asked to stop
// that dies of what it runs on its way out (exit 3 while being stopped: a
// crash job's) counts a crash against its tasks; only a clean exit, or
// SIGTERM's, is the stop's (E45). Explorer seeds 150226 and 140201: a crash
// job whose process exited 3 while it was being released ran once more
// than job_crash_retries allows.
func TestViolentExitDuringAStopCountsAgainstTheTasks(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "term-exit", "3"}}},
		Policy:    longBackoff,
		Recoverer: rec,
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	c, err := h.sup.StopComponent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitCode != 3 || c.Status != health.StatusStopped {
		t.Fatalf("after the stop: %s, want stopped with exit code 3", describe(c))
	}
	if want := (recovered{id, pid, true}); !slices.Contains(rec.asked(), want) {
		t.Errorf("asked to recover %v after a violent exit during a stop, want %v", rec.asked(), want)
	}
}
