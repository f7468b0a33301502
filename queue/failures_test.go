package queue_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// max_consecutive_failures: a worker whose last N tasks all failed stops
// gracefully and returns ErrTooManyFailures (its process exits non-zero:
// a counted crash, a fresh process); a success in between starts the
// count again; a task with no handler does not count.
func TestMaxConsecutiveFailures(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.MaxConsecutiveFailures = 3
	var mu sync.Mutex
	var ran []string
	handlers := map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			mu.Lock()
			ran = append(ran, string(t.Payload()))
			mu.Unlock()
			if string(t.Payload())[0] == 'f' {
				return errors.New("upstream down")
			}
			return nil
		}),
	}
	// Enqueued before the worker starts: it takes them in order.
	c := e.client()
	for _, p := range []string{"f1", "f2", "ok"} {
		e.enqueue(c, "job", p, asynq.MaxRetry(0))
	}
	e.enqueue(c, "unknown-type", "", asynq.MaxRetry(0))
	for _, p := range []string{"f3", "f4", "f5", "never"} {
		e.enqueue(c, "job", p, asynq.MaxRetry(0))
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- queue.RunWorker(ctx, cfg, handlers) }()
	select {
	case err := <-done:
		if !errors.Is(err, queue.ErrTooManyFailures) {
			t.Fatalf("RunWorker: %v, want ErrTooManyFailures", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not stop after three failures in a row")
	}
	mu.Lock()
	defer mu.Unlock()
	// "never" may have been taken in the moment before the shutdown.
	if want := []string{"f1", "f2", "ok", "f3", "f4", "f5"}; len(ran) < len(want) || !slices.Equal(ran[:len(want)], want) {
		t.Fatalf("ran %v, want %v first (the success resets the count; the unknown type does not count)", ran, want)
	}
}

// TestStuckHandlerKeepsItsTaskAndEndsTheWorker (explorer seed 170738): a
// handler that does not return once its task's deadline passed. asynq
// would archive (or retry) the task while the handler is still inside it,
// and a retry, an operator's too, would run it in a second handler. The
// task stays active under this process, its running record kept; the
// worker finishes its other task and returns ErrStuckHandler (the process
// exits non-zero); the supervisor's requeue then counts the crash against
// the task, which runs again elsewhere.
func TestStuckHandlerKeepsItsTaskAndEndsTheWorker(t *testing.T) {
	// The task's own timeout (asynq gives up on it without waiting for the
	// middleware), or the pool's (the middleware's own).
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "task timeout", false: "pool task_timeout"}[own], func(t *testing.T) {
			stuckHandler(t, own)
		})
	}
}

func stuckHandler(t *testing.T, ownTimeout bool) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 2
	cfg.Env.ShutdownTimeout = 2 * time.Second
	hangOpts := []asynq.Option{asynq.MaxRetry(0), asynq.Retention(time.Hour)}
	if ownTimeout {
		hangOpts = append(hangOpts, asynq.Timeout(time.Second)) // asynq's unit is the second
	} else {
		cfg.Env.TaskTimeout = 500 * time.Millisecond
	}
	release := make(chan struct{}) // ends the stuck handler, as the process's exit would
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	hangIn, slowIn, slowGo := make(chan struct{}), make(chan struct{}), make(chan struct{})
	handlers := map[string]asynq.Handler{
		"hang": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			close(hangIn)
			<-release // whatever its context says
			return nil
		}),
		"slow": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			close(slowIn)
			<-slowGo
			return nil
		}),
	}
	ended := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { ended <- queue.RunWorker(ctx, cfg, handlers) }()
	w := e.watch()
	c := e.client()
	slow := e.enqueue(c, "slow", "", asynq.Retention(time.Hour), asynq.Timeout(time.Minute))
	receive(t, slowIn)
	hang := e.enqueue(c, "hang", "", hangOpts...)
	receive(t, hangIn)
	stuck := w.untilJob(hang, queue.StateStuck)
	if !strings.Contains(stuck.Error, "did not return") {
		t.Errorf("stuck event's error: %q", stuck.Error)
	}
	// Not archived at its deadline: active under this process, its
	// handler's run on record.
	owner := cfg.Env.Component.String() + ":" + strconv.Itoa(os.Getpid())
	if h := e.Client.HGetAll(context.Background(), "asynq:{"+e.q+"}:t:"+hang).Val(); h["state"] != "active" || h["vigil_owner"] != owner {
		t.Fatalf("stuck task: state %q owner %q, want active under %s", h["state"], h["vigil_owner"], owner)
	}
	if e.Client.HGet(context.Background(), e.store.Keys().Running(cfg.Env.Component), hang).Val() == "" {
		t.Fatal("the stuck task's running record is gone")
	}
	// The other task finishes; then the worker ends.
	select {
	case err := <-ended:
		t.Fatalf("RunWorker returned before its other task was done: %v", err)
	default:
	}
	close(slowGo)
	select {
	case err := <-ended:
		if !errors.Is(err, queue.ErrStuckHandler) {
			t.Fatalf("RunWorker: %v, want ErrStuckHandler", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not stop after a handler got stuck")
	}
	w.untilJob(slow, done)
	if info, err := e.insp.GetTaskInfo(e.q, hang); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("stuck task after the worker stopped: %+v, %v; want still active", info, err)
	}
	// The process exits non-zero: the supervisor requeues the task,
	// counting the crash.
	close(release)
	n, err := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log}).Recover(context.Background(), cfg.Env.Component, os.Getpid(), true)
	if err != nil || n != 1 {
		t.Fatalf("recover the stuck task: %d, %v", n, err)
	}
	if got := w.untilJob(hang, queue.StateRequeuedStale).Crashes; got != 1 {
		t.Errorf("crashes counted against the stuck task: %d, want 1", got)
	}
}

// A handler stuck while its worker stops (review of E52): the task's
// deadline passes during the shutdown, or the stop comes in the grace
// after the deadline. Either way the task stays active under the process,
// its running record kept, and RunWorker returns ErrStuckHandler: the
// process exits non-zero and the supervisor counts the crash against the
// task. Before, the first archived the task while its handler was inside
// (asynq's deadline outcome was written: the shutdown was taken for the
// hand-back), and the second returned nil (a clean exit, nothing counted).
func TestStuckHandlerDuringAStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stopFirst: the stop comes before the deadline; else once the
		// handler's context ended, within the grace.
		stopFirst bool
	}{
		{"deadline during the shutdown", true},
		{"stop during the grace", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newQEnv(t)
			cfg := e.config(0)
			cfg.Env.ShutdownTimeout = 4 * time.Second
			cfg.Env.TaskTimeout = 1500 * time.Millisecond
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			hangIn, ctxEnded := make(chan struct{}), make(chan struct{})
			handlers := map[string]asynq.Handler{
				"hang": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
					close(hangIn)
					<-ctx.Done()
					close(ctxEnded)
					<-release // whatever its context says
					return nil
				}),
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() { ended <- queue.RunWorker(ctx, cfg, handlers) }()
			w := e.watch()
			hang := e.enqueue(e.client(), "hang", "", asynq.MaxRetry(0), asynq.Retention(time.Hour))
			receive(t, hangIn)
			if tc.stopFirst {
				cancel()
			} else {
				receive(t, ctxEnded)
				cancel()
			}
			w.untilJob(hang, queue.StateStuck)
			var err error
			select {
			case err = <-ended:
			case <-time.After(waitTimeout):
				t.Fatal("RunWorker did not return")
			}
			if !errors.Is(err, queue.ErrStuckHandler) {
				t.Errorf("RunWorker: %v, want ErrStuckHandler (a non-zero exit: the crash is counted)", err)
			}
			owner := cfg.Env.Component.String() + ":" + strconv.Itoa(os.Getpid())
			if h := e.Client.HGetAll(context.Background(), "asynq:{"+e.q+"}:t:"+hang).Val(); h["state"] != "active" || h["vigil_owner"] != owner {
				t.Fatalf("stuck task: state %q owner %q, want active under %s (events %v)", h["state"], h["vigil_owner"], owner, e.states(hang))
			}
			if e.Client.HGet(context.Background(), e.store.Keys().Running(cfg.Env.Component), hang).Val() == "" {
				t.Fatal("the stuck task's running record is gone")
			}
		})
	}
}

// TestStuckHandlerKeepsItsNeighboursOut (CI's explorer run of seed 203): a
// stuck handler is still running, so no other handler may begin in its
// process. A task with a crash on record runs alone (gate.go); before, the
// stuck handler's middleware gave its turn back when it gave up on it, the
// suspect task then ran "alone" beside the stuck one, and the process's
// end counted the crash against both as neighbours: the toxic task ran
// once more than job_crash_retries allows. Now the suspect waits until the
// worker ends and is handed back to asynq, not begun, its counters as they
// were.
func TestStuckHandlerKeepsItsNeighboursOut(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 2
	cfg.Env.TaskTimeout = 500 * time.Millisecond
	cfg.Env.ShutdownTimeout = time.Second
	release := make(chan struct{}) // ends the stuck handler, as the process's exit would
	t.Cleanup(func() { close(release) })
	hangIn, suspectIn := make(chan struct{}), make(chan struct{}, 1)
	handlers := map[string]asynq.Handler{
		"hang": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			close(hangIn)
			<-release // whatever its context says
			return nil
		}),
		"suspect": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			suspectIn <- struct{}{}
			return nil
		}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- queue.RunWorker(ctx, cfg, handlers) }()
	w := e.watch()
	c := e.client()
	hang := e.enqueue(c, "hang", "", asynq.MaxRetry(0), asynq.Retention(time.Hour))
	receive(t, hangIn)
	// One crash on record, beside a neighbour: it must run alone.
	crashKey := e.store.Keys().JobCrashes(e.q, "suspect")
	if err := e.Client.Set(context.Background(), crashKey, 1, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	e.enqueue(c, "suspect", "", asynq.TaskID("suspect"), asynq.MaxRetry(0), asynq.Retention(time.Hour))
	w.untilJob(hang, queue.StateStuck)
	select {
	case err := <-ended:
		if !errors.Is(err, queue.ErrStuckHandler) {
			t.Fatalf("RunWorker: %v, want ErrStuckHandler", err)
		}
	case <-suspectIn:
		t.Fatal("a task that must run alone began beside a stuck handler")
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not stop after a handler got stuck")
	}
	select {
	case <-suspectIn:
		t.Fatal("a task that must run alone began beside a stuck handler")
	default:
	}
	info, err := e.insp.GetTaskInfo(e.q, "suspect")
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("the waiting task after the worker ended: %+v, %v; want pending (handed back)", info, err)
	}
	if v := e.Client.Get(context.Background(), crashKey).Val(); v != "1" {
		t.Fatalf("its crash counter: %q, want 1 (it did not run)", v)
	}
}
