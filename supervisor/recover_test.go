package supervisor_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
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

// TestLostHostsOwnRecoveryCountsItsWorkersCrash: explorer seed 110816. A
// host took over a slot from a host it found lost (its lease lapsed: here
// its supervisor is frozen) whose worker still ran on this machine, and
// SIGTERMed that worker; a crash job brought the worker down on its way out
// (exit 3). Only its parent, the lost host's supervisor, sees how it ended
// and counts that crash against the task; the taker cannot tell, and its
// own recovery, first by 11 ms, put the task back uncounted: the job ran
// once more than job_crash_retries allows. The taker now gives a live
// parent an op_timeout to recover first.
func TestLostHostsOwnRecoveryCountsItsWorkersCrash(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	// asynq's keys carry no test prefix: a queue of the test's own.
	q := "lost" + strconv.FormatInt(time.Now().UnixNano(), 36)
	id := health.ComponentID{Queue: q}
	c := startHostProcess(t, env, "c", 1, clusterLease, "-mode", "term-exit 3", "-queue", q, "-recover")
	pid := waitFor(t, store, id, isStatus(health.StatusHealthy)).PID
	// A crash job's handler is inside its task in that worker.
	state := activeTask(t, env.Client, id, pid, "toxic")
	if err := env.Client.HSet(context.Background(), store.Keys().Running(id), "toxic", strconv.Itoa(pid)+":"+strconv.FormatInt(time.Now().UnixMilli(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	// Host c is lost to the cluster (its supervisor cannot renew), not
	// dead: it reaps its worker once it runs again.
	if err := syscall.Kill(c.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(c.Process.Pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	b := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Host: "b", Lease: clusterLease, StopTimeout: time.Second,
		// The parent's grace is an op_timeout: room for c to wake and
		// recover on a loaded machine.
		OpTimeout: 3 * time.Second,
		Pools:     []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    shortBackoff,
		Recoverer: queue.NewRecoverer(store, queue.RecovererConfig{Logger: slog.New(slog.DiscardHandler)}),
	})
	b.start()
	b.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(pid), "lost_host=true")
	// The worker exits 3 on the SIGTERM: a zombie until c reaps it.
	for deadline := time.Now().Add(waitTimeout); !gone(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d still runs after the taker's SIGTERM", pid)
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
	cont()
	for deadline := time.Now().Add(waitTimeout); state() != "pending"; {
		if time.Now().After(deadline) {
			t.Fatalf("task %q after the worker's exit, want pending", state())
		}
		<-time.After(10 * time.Millisecond) // polling the task's state in Redis
	}
	if n, _ := env.Client.Get(context.Background(), store.Keys().JobCrashes(q, "toxic")).Int(); n != 1 {
		t.Errorf("crashes counted against the task whose handler brought its worker down: %d, want 1", n)
	}
}
