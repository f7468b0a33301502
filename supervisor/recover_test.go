package supervisor_test

import (
	"context"
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
