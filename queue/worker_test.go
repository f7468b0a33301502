package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

func states(s ...queue.JobState) []queue.JobState { return s }

const (
	created    = queue.StateCreated
	processing = queue.StateProcessing
	progress   = queue.StateProgress
	done       = queue.StateDone
	failed     = queue.StateError
)

func TestNormalJobEventOrder(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	e.runWorker(cfg, map[string]asynq.Handler{
		"steps": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			for _, p := range []float64{10, 50, 100} {
				if err := queue.Progress(ctx, p); err != nil {
					return err
				}
			}
			if p, ok := queue.LastProgress(ctx); !ok || p != 100 {
				return fmt.Errorf("LastProgress = %v, %v", p, ok)
			}
			return nil
		}),
	})
	w := e.watch()
	id := e.enqueue(e.client(), "steps", "")
	w.untilJob(id, done)
	// The copy on queue:jobs is the same entry (also queue:jobs).
	w.until("done on queue:jobs", waitTimeout, func(seen []streamEvent) bool {
		return slices.ContainsFunc(seen, func(se streamEvent) bool {
			return se.ev.Topic == queue.TopicJobs && se.job.ID == id && se.job.State == done
		})
	})
	want := states(created, processing, progress, progress, progress, done)
	if got := e.states(id); !slices.Equal(got, want) {
		t.Fatalf("events of %s: %v, want %v", id, got, want)
	}
	// The same events, in the same order, on queue:jobs.
	var all []queue.JobState
	for _, se := range e.events(queue.TopicJobs) {
		if se.job.ID == id {
			all = append(all, se.job.State)
		}
	}
	if !slices.Equal(all, want) {
		t.Fatalf("queue:jobs events of %s: %v, want %v", id, all, want)
	}
	if p, ok, err := queue.ReadProgress(context.Background(), e.store, e.q, id); err != nil || !ok || p != 100 {
		t.Fatalf("ReadProgress = %v, %v, %v; want 100", p, ok, err)
	}
	ev := e.events(queue.JobTopic(e.q, id))[1].job
	if ev.Component != cfg.Env.Component.String() || ev.PID == 0 || ev.Type != "steps" {
		t.Fatalf("processing event %+v: want component, pid and type", ev)
	}
	// Running entries go when the task ends.
	if n := e.Client.HLen(context.Background(), e.store.Keys().Running(cfg.Env.Component)).Val(); n != 0 {
		t.Fatalf("running hash has %d entries after the task", n)
	}
}

func TestFailures(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	e.runWorker(cfg, map[string]asynq.Handler{
		"flaky": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("upstream timeout") }),
		"bad": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return fmt.Errorf("INPUT_TOO_LARGE: %w", queue.ErrNonRetryable)
		}),
		"panics": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") }),
		"ok":     asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
	})
	c := e.client()
	tests := []struct {
		name    string
		typ     string
		opts    []asynq.Option
		want    []queue.JobState
		code    string
		lastErr string
	}{
		{"retried then exhausted", "flaky", []asynq.Option{asynq.MaxRetry(2)},
			states(created, processing, failed, processing, failed, processing, failed), queue.CodeRetriesExhausted,
			"RETRIES_EXHAUSTED: upstream timeout"},
		{"non-retryable fails at once", "bad", []asynq.Option{asynq.MaxRetry(5)},
			states(created, processing, failed), queue.CodeNonRetryable,
			"NON_RETRYABLE: INPUT_TOO_LARGE: non-retryable"},
		// An unknown type is retried per MaxRetry (a rolling deploy), then
		// archived, as asynq does.
		{"no handler: retried, then archived", "nobody", []asynq.Option{asynq.MaxRetry(2)},
			states(created, processing, failed, processing, failed, processing, failed), queue.CodeNoHandler,
			`NO_HANDLER: no handler for task type "nobody" in queue "` + e.q + `"`},
		{"panic is a failure, not a crash", "panics", []asynq.Option{asynq.MaxRetry(0)},
			states(created, processing, failed), queue.CodeRetriesExhausted, "RETRIES_EXHAUSTED: panic: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := e.watch()
			id := e.enqueue(c, tt.typ, "", tt.opts...)
			var last queue.JobEvent
			w.until(tt.name, waitTimeout, func(seen []streamEvent) bool {
				for _, se := range seen {
					if se.job.ID == id && se.ev.Topic == queue.JobTopic(e.q, id) && se.job.Final {
						last = se.job
						return true
					}
				}
				return false
			})
			if got := e.states(id); !slices.Equal(got, tt.want) {
				t.Fatalf("events %v, want %v", got, tt.want)
			}
			if last.Code != tt.code {
				t.Fatalf("final event code %q, want %q (%+v)", last.Code, tt.code, last)
			}
			info := waitArchived(t, e, id)
			if info.LastErr != tt.lastErr {
				t.Fatalf("archived LastErr %q, want %q", info.LastErr, tt.lastErr)
			}
		})
	}
	// The worker is still there: a good task after all of that completes.
	w := e.watch()
	id := e.enqueue(c, "ok", "")
	w.untilJob(id, done)
	if m := cfg.Metrics; m.RetriesExhausted.Load() != 2 || m.JobsDone.Load() != 1 || m.NoHandler.Load() != 3 {
		t.Fatalf("metrics %v", m.Snapshot())
	}
}

// waitArchived waits until asynq has archived task id (the middleware's
// final event precedes asynq's move by a moment).
func waitArchived(tb testing.TB, e *qenv, id string) *asynq.TaskInfo {
	tb.Helper()
	w := e.watch()
	var info *asynq.TaskInfo
	w.until("task "+id+" archived", waitTimeout, func([]streamEvent) bool {
		i, err := e.insp.GetTaskInfo(e.q, id)
		if err == nil && i.State == asynq.TaskStateArchived {
			info = i
			return true
		}
		return false
	})
	return info
}

func TestToxicTaskIsArchivedWithoutRunning(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	ran := make(chan string, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			ran <- id
			return nil
		}),
	})
	ctx := context.Background()
	// Two crashes so far: still within job_crash_retries (2), it runs;
	// three, one of them with its handler alone in its worker: toxic.
	e.Client.Set(ctx, e.store.Keys().JobCrashes(e.q, "two"), 2, time.Hour)
	e.Client.Set(ctx, e.store.Keys().JobSoloCrashes(e.q, "two"), 2, time.Hour)
	e.Client.Set(ctx, e.store.Keys().JobCrashes(e.q, "three"), 3, time.Hour)
	e.Client.Set(ctx, e.store.Keys().JobSoloCrashes(e.q, "three"), 1, time.Hour)
	w := e.watch()
	c := e.client()
	e.enqueue(c, "job", "", asynq.TaskID("three"))
	e.enqueue(c, "job", "", asynq.TaskID("two"))
	tox := w.untilJob("three", queue.StateToxic)
	w.untilJob("two", done)
	if got := <-ran; got != "two" {
		t.Fatalf("handler ran %q", got)
	}
	select {
	case id := <-ran:
		t.Fatalf("handler ran %q too", id)
	default:
	}
	if tox.Crashes != 3 || tox.Error != "toxic: worker crashed 3 times" || !tox.Final {
		t.Fatalf("toxic event %+v", tox)
	}
	if got := e.states("three"); !slices.Equal(got, states(created, queue.StateToxic)) {
		t.Fatalf("events of the toxic task: %v", got)
	}
	info := waitArchived(t, e, "three")
	if info.LastErr != "toxic: worker crashed 3 times" {
		t.Fatalf("LastErr %q", info.LastErr)
	}
	// A task that succeeds after crashes drops its counter.
	if n := e.Client.Exists(ctx, e.store.Keys().JobCrashes(e.q, "two"), e.store.Keys().JobSoloCrashes(e.q, "two")).Val(); n != 0 {
		t.Fatal("crash counters of a completed task kept")
	}
	if n := e.Client.Exists(ctx, e.store.Keys().JobCrashes(e.q, "three"), e.store.Keys().JobSoloCrashes(e.q, "three")).Val(); n != 0 {
		t.Fatal("crash counters of a task archived as toxic kept")
	}
	if n := cfg.Metrics.ToxicJobs.Load(); n != 1 {
		t.Fatalf("toxic metric %d", n)
	}
	// The operator runs the archived task again (issue 12, defect 6): it
	// runs, rather than being archived again at once by the counter that
	// made it toxic (the count stays in the archived task's error).
	if err := e.insp.RunTask(e.q, "three"); err != nil {
		t.Fatalf("run the archived task: %v", err)
	}
	w.untilJob("three", done)
	if got := <-ran; got != "three" {
		t.Fatalf("handler ran %q", got)
	}
	if n := cfg.Metrics.ToxicJobs.Load(); n != 1 {
		t.Fatalf("archived again as toxic: toxic metric %d", n)
	}
}

// TestToxicCountersOutliveALostArchive (fault explorer E58): a task is
// given the toxic verdict, and its worker is cut from Redis before asynq's
// archive reaches it. Invariant 7: a task runs at most job_crash_retries+1
// times. So its crash counters stay until the archive is written, and go
// with it:
//   - the worker dies there: the supervisor's recovery puts the task back,
//     and a replacement's dequeue archives it without running it. Before,
//     the verdict deleted the counters in a write of its own, the task
//     came back with no crash on record and ran (explorer seed 239727: 4
//     runs where 2 were allowed);
//   - Redis comes back: the worker's kept archive is written, and deletes
//     them (an operator's run of the archived task gets a run, defect 6).
func TestToxicCountersOutliveALostArchive(t *testing.T) {
	for _, dies := range []bool{true, false} {
		name := "the worker dies"
		if !dies {
			name = "redis comes back"
		}
		t.Run(name, func(t *testing.T) { toxicArchiveLost(t, dies) })
	}
}

func toxicArchiveLost(t *testing.T, dies bool) {
	e := newQEnv(t)
	cfg := e.config(0)
	p := e.viaProxy(&cfg)
	ran := make(chan string, 10)
	handlers := map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			ran <- id
			return nil
		}),
	}
	e.runWorker(cfg, handlers)
	ctx := context.Background()
	keys := e.store.Keys()
	counters := []string{keys.JobCrashes(e.q, "three"), keys.JobSoloCrashes(e.q, "three")}
	e.Client.Set(ctx, counters[0], 3, time.Hour)
	e.Client.Set(ctx, counters[1], 1, time.Hour)
	taskKey, active := "asynq:{"+e.q+"}:t:three", "asynq:{"+e.q+"}:active"
	held, release := p.HoldCommand(func(args []string) bool { // the archive: KEYS[1] the task, KEYS[2] active
		return len(args) > 4 && (strings.EqualFold(args[0], "eval") || strings.EqualFold(args[0], "evalsha")) &&
			args[3] == taskKey && args[4] == active
	})
	defer release()
	w := e.watch()
	e.enqueue(e.client(), "job", "", asynq.TaskID("three"))
	receive(t, held)
	// The verdict's event went out on another connection while the
	// archive waits: the counters are still there.
	w.untilJob("three", queue.StateToxic)
	if n := e.Client.Exists(ctx, counters...).Val(); n != 2 {
		t.Fatalf("%d of the 2 crash counters left while the toxic task's archive is not written", n)
	}
	p.Refuse(true)
	p.Cut() // the archive never reaches Redis
	e.untilLog("task outcome kept")
	verdicts := cfg.Metrics
	if dies {
		// The supervisor, which would see the worker dead, recovers its
		// task. Back, the worker's kept archive is stale (the task is no
		// longer active under it), and, its process declared dead, it
		// takes no task; a replacement's dequeue gives the verdict again.
		n, err := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log}).Recover(ctx, cfg.Env.Component, os.Getpid(), true)
		if err != nil || n != 1 {
			t.Fatalf("recover the task: %d, %v; task %v, active %v, lease %v, running %v", n, err,
				e.Client.HGetAll(ctx, taskKey).Val(), e.Client.LRange(ctx, active, 0, -1).Val(),
				e.Client.ZRangeWithScores(ctx, "asynq:{"+e.q+"}:lease", 0, -1).Val(), e.Client.HGetAll(ctx, keys.Running(cfg.Env.Component)).Val())
		}
		p.Refuse(false)
		e.untilLog("kept outcome not needed")
		next := e.config(1)
		e.runWorker(next, handlers)
		verdicts = next.Metrics
	} else {
		p.Refuse(false)
		e.untilLog("kept outcome written")
	}
	info := waitArchived(t, e, "three")
	if info.LastErr != "toxic: worker crashed 3 times" {
		t.Fatalf("archived with LastErr %q", info.LastErr)
	}
	select {
	case id := <-ran:
		t.Fatalf("the toxic task %s ran", id)
	default:
	}
	if got := verdicts.ToxicJobs.Load(); got != 1 {
		t.Fatalf("toxic verdicts %d, want 1", got)
	}
	if n := e.Client.Exists(ctx, counters...).Val(); n != 0 {
		t.Fatalf("%d crash counters left after the toxic archive", n)
	}
}

func TestShutdownAbortsAndRequeuesWhatOutlastsIt(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 2
	cfg.Env.ShutdownTimeout = 500 * time.Millisecond
	finish := make(chan struct{}) // lets "finishes" end
	never := make(chan struct{})  // "outlasts" ignores its context until the test ends
	outlastsIn := make(chan struct{})
	t.Cleanup(func() { close(never) })
	stop := e.runWorker(cfg, map[string]asynq.Handler{
		"finishes": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			<-finish
			return nil
		}),
		"outlasts": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			close(outlastsIn)
			<-never
			return nil
		}),
	})
	c := e.client()
	w := e.watch()
	a := e.enqueue(c, "finishes", "")
	b := e.enqueue(c, "outlasts", "")
	w.untilJob(a, processing)
	w.untilJob(b, processing)
	receive(t, outlastsIn) // its handler is inside (not only recorded as processing)

	stopping := e.logs.waitFor("worker stopping")
	stopped := make(chan error, 1)
	begin := time.Now()
	go func() { stopped <- stop() }()
	receive(t, stopping)
	close(finish) // a finishes during the shutdown; b outlasts it
	if err := receive(t, stopped); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("shutdown took %s with a 500ms shutdown timeout", d)
	}
	if got := e.states(a); !slices.Equal(got, states(created, processing, done)) {
		t.Fatalf("task that finished in time: %v", got)
	}
	if got := e.states(b); !slices.Equal(got, states(created, processing, queue.StateAbortedShutdown)) {
		t.Fatalf("task that outlasted the shutdown: %v", got)
	}
	// Its handler never returned: it is not handed back while inside
	// (finding E8), but left active under this process, and the
	// supervisor's requeue puts it back once the process is gone.
	info, err := e.insp.GetTaskInfo(e.q, b)
	if err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("aborted task whose handler stays: %+v, %v; want it left active", info, err)
	}
	// The process then ends cleanly (exit 0 after its shutdown bound): a
	// stop's exit, which counts no crash against its tasks (E45); a
	// violent one would (TestShutdownNeverHandsBackARunningHandler).
	if n, err := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log}).Recover(context.Background(), cfg.Env.Component, os.Getpid(), false); err != nil || n != 1 {
		t.Fatalf("recover the aborted task: %d, %v", n, err)
	}
	info, err = e.insp.GetTaskInfo(e.q, b)
	if err != nil || info.State != asynq.TaskStatePending || info.Retried != 0 {
		t.Fatalf("aborted task: %+v, %v; want it pending again, no attempt counted", info, err)
	}
	if n := e.Client.Exists(context.Background(), e.store.Keys().JobCrashes(e.q, b)).Val(); n != 0 {
		t.Fatal("a crash was counted for the aborted task")
	}
	if n := e.Client.HLen(context.Background(), e.store.Keys().Running(cfg.Env.Component)).Val(); n != 0 {
		t.Fatalf("running hash keeps %d entries after shutdown", n)
	}
	if n := cfg.Metrics.AbortedOnShutdown.Load(); n != 1 {
		t.Fatalf("aborted metric %d", n)
	}
}

// receive waits for one value from ch, failing tb after waitTimeout.
func receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatal("timed out waiting for a value")
		var zero T
		return zero
	}
}

func TestScratchDirectories(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_scratch_on_success=%v", keep), func(t *testing.T) {
			e := newQEnv(t)
			cfg := e.config(0)
			cfg.Env.KeepScratchOnSuccess = keep
			dirs := make(chan string, 2)
			e.runWorker(cfg, map[string]asynq.Handler{
				"work": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
					dir, err := queue.ScratchDir(ctx)
					if err != nil {
						return err
					}
					if again, _ := queue.ScratchDir(ctx); again != dir {
						return fmt.Errorf("second ScratchDir %q, first %q", again, dir)
					}
					dirs <- dir
					if err := os.WriteFile(filepath.Join(dir, "out.bin"), make([]byte, 1234), 0o600); err != nil {
						return err
					}
					if string(t.Payload()) == "fail" {
						return queue.NonRetryable(errors.New("failed on purpose"))
					}
					return nil
				}),
			})
			c := e.client()
			w := e.watch()
			okID := e.enqueue(c, "work", "ok")
			w.untilJob(okID, done)
			okDir := <-dirs
			failID := e.enqueue(c, "work", "fail")
			w.untilJob(failID, failed)
			failDir := <-dirs
			if _, err := os.Stat(okDir); (err == nil) != keep {
				t.Fatalf("scratch of the successful task: stat err %v, keep %v", err, keep)
			}
			if _, err := os.Stat(filepath.Join(failDir, "out.bin")); err != nil {
				t.Fatalf("scratch of the failed task must be kept: %v", err)
			}
			if !strings.HasPrefix(failDir, cfg.Env.ScratchDir) {
				t.Fatalf("scratch %s not under %s", failDir, cfg.Env.ScratchDir)
			}
			if !e.logs.contains("bytes=1234") {
				t.Fatalf("kept scratch size not logged:\n%s", e.logs.String())
			}
			// The failure's event says where the kept directory is.
			evs := e.events(queue.JobTopic(e.q, failID))
			if last := evs[len(evs)-1].job; last.ScratchDir != failDir || last.ScratchBytes != 1234 {
				t.Errorf("failure event: scratch %q, %d bytes; want %q, 1234", last.ScratchDir, last.ScratchBytes, failDir)
			}
			// And the job's detail finds it (server: scratch_dir).
			if v := e.Client.Get(context.Background(), e.store.Keys().JobScratch(e.q, failID)).Val(); v != "1234 "+failDir {
				t.Errorf("job scratch key %q, want %q", v, "1234 "+failDir)
			}
		})
	}
}

func TestOutsideATask(t *testing.T) {
	ctx := context.Background()
	if err := queue.Progress(ctx, 5); !errors.Is(err, queue.ErrNotInTask) {
		t.Fatalf("Progress outside a task: %v", err)
	}
	if _, err := queue.ScratchDir(ctx); !errors.Is(err, queue.ErrNotInTask) {
		t.Fatalf("ScratchDir outside a task: %v", err)
	}
	if _, ok := queue.LastProgress(ctx); ok || queue.Crashes(ctx) != 0 {
		t.Fatal("LastProgress or Crashes outside a task")
	}
}

// TestSharedCrashesAloneAreNotToxic (finding E12): a task past its crash
// limit whose crashes all came with other handlers in flight (none can be
// told its own) is not archived: it runs, alone.
func TestSharedCrashesAloneAreNotToxic(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 2
	ran := make(chan string, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			ran <- id
			return nil
		}),
	})
	ctx := context.Background()
	e.Client.Set(ctx, e.store.Keys().JobCrashes(e.q, "shared"), 3, time.Hour)
	w := e.watch()
	e.enqueue(e.client(), "job", "", asynq.TaskID("shared"))
	w.untilJob("shared", done)
	if got := receive(t, ran); got != "shared" {
		t.Fatalf("handler ran %q", got)
	}
	if n := cfg.Metrics.ToxicJobs.Load(); n != 0 {
		t.Fatalf("toxic metric %d", n)
	}
}
