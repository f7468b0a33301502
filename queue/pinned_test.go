package queue_test

import (
	"context"
	"debug/buildinfo"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// TestAsynqPinned fails when an asynq upgrade changes what the fast requeue
// relies on (docs/design.md §9): the version, the keys and fields of a pending
// and an active task, the dequeue script the worker's hook recognizes, and
// asynq's behaviour after the requeue (the task runs once more, as a first
// attempt, and asynq's own recoverer leaves it alone).
func TestAsynqPinned(t *testing.T) {
	// The worker binary built from this module (test binaries carry no
	// module versions).
	bi, err := buildinfo.ReadFile(testJobWorker)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range bi.Deps {
		if d.Path == "github.com/hibiken/asynq" {
			found = true
			if d.Version != queue.AsynqVersion || d.Replace != nil {
				t.Fatalf("built with asynq %s (replace %v); the fast requeue is verified for %s: re-verify docs/design.md §9 and update queue.AsynqVersion and the dequeue script copy",
					d.Version, d.Replace, queue.AsynqVersion)
			}
		}
	}
	if !found {
		t.Fatal("asynq is not in the build info")
	}

	e := newQEnv(t)
	ctx := context.Background()
	rdb := e.Client
	taskKey := func(id string) string { return "asynq:{" + e.q + "}:t:" + id }
	list := func(name string) []string { return rdb.LRange(ctx, "asynq:{"+e.q+"}:"+name, 0, -1).Val() }
	inLease := func(id string) bool { return rdb.ZScore(ctx, "asynq:{"+e.q+"}:lease", id).Err() == nil }
	field := func(id, f string) string { return rdb.HGet(ctx, taskKey(id), f).Val() }

	// A pending task.
	id := e.enqueue(e.client(), "hold", "", asynq.Retention(time.Hour))
	if !slices.Contains(list("pending"), id) || field(id, "state") != "pending" || field(id, "pending_since") == "" || field(id, "msg") == "" {
		t.Fatalf("pending task layout: pending=%v hash=%v", list("pending"), rdb.HGetAll(ctx, taskKey(id)).Val())
	}

	// An active task, dequeued by a worker process through the hook (the
	// owner field proves asynq still sends the dequeue script we know).
	s := e.supervise(pool{workers: 1, noRecoverer: true, backoff: time.Hour})
	w := e.watch()
	proc := w.untilJob(id, queue.StateProcessing)
	owner := proc.Component + ":" + strconv.Itoa(proc.PID)
	if !slices.Contains(list("active"), id) || !inLease(id) || field(id, "state") != "active" ||
		field(id, "pending_since") != "" || field(id, "vigil_owner") != owner {
		t.Fatalf("active task layout: active=%v lease=%v hash=%v; want owner %q",
			list("active"), inLease(id), rdb.HGetAll(ctx, taskKey(id)).Val(), owner)
	}

	// The worker dies; with no Recoverer the task stays active (asynq
	// alone would bring it back 60-120 s later).
	kill(t, proc.PID)
	w.until("the worker crashed", waitTimeout, func([]streamEvent) bool {
		c, err := e.store.Get(ctx, s.ids[0])
		return err == nil && c.Status == health.StatusCrashed && c.PID == proc.PID
	})
	if !slices.Contains(list("active"), id) || !inLease(id) {
		t.Fatal("the dead worker's task left active on its own")
	}

	rec := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log, Metrics: new(queue.Metrics)})
	before := time.Now()
	n, err := rec.Recover(ctx, s.ids[0], proc.PID, true)
	if err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want 1", n, err)
	}
	since, _ := strconv.ParseInt(field(id, "pending_since"), 10, 64)
	if pend := list("pending"); len(pend) == 0 || pend[len(pend)-1] != id || slices.Contains(list("active"), id) || inLease(id) ||
		field(id, "state") != "pending" || since < before.UnixNano() || field(id, "vigil_owner") != "" {
		t.Fatalf("requeued task layout: pending=%v active=%v lease=%v hash=%v", pend, list("active"), inLease(id), rdb.HGetAll(ctx, taskKey(id)).Val())
	}
	crashKey := e.store.Keys().JobCrashes(e.q, id)
	if v := rdb.Get(ctx, crashKey).Val(); v != "1" {
		t.Fatalf("crash counter %q, want 1", v)
	}
	if ttl := rdb.PTTL(ctx, crashKey).Val(); ttl < queue.JobKeyTTL-time.Minute || ttl > queue.JobKeyTTL {
		t.Fatalf("crash counter TTL %s, want %s", ttl, queue.JobKeyTTL)
	}
	if n, err := rec.Recover(ctx, s.ids[0], proc.PID, true); err != nil || n != 0 {
		t.Fatalf("second Recover = %d, %v; want 0", n, err)
	}

	// Plain asynq takes it from there: it runs once, as a first attempt;
	// asynq's recoverer (which runs as the server starts) leaves it alone.
	handled := make(chan string, 10)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{e.q: 1}, Concurrency: 1,
		TaskCheckInterval: 20 * time.Millisecond, Logger: asynqQuiet{}})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		tid, _ := asynq.GetTaskID(ctx)
		handled <- tid
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if got := receive(t, handled); got != id {
		t.Fatalf("asynq handled %q", got)
	}
	var info *asynq.TaskInfo
	w.until("asynq to complete the task", waitTimeout, func([]streamEvent) bool {
		info, err = e.insp.GetTaskInfo(e.q, id)
		return err == nil && info.State == asynq.TaskStateCompleted
	})
	if info.Retried != 0 || info.LastErr != "" {
		t.Fatalf("after the fast requeue asynq shows retried %d, last error %q", info.Retried, info.LastErr)
	}
	srv.Shutdown()
	select {
	case again := <-handled:
		t.Fatalf("task %s handled twice", again)
	default:
	}
}

// asynqQuiet drops asynq's log lines.
type asynqQuiet struct{}

func (asynqQuiet) Debug(...any) {}
func (asynqQuiet) Info(...any)  {}
func (asynqQuiet) Warn(...any)  {}
func (asynqQuiet) Error(...any) {}
func (asynqQuiet) Fatal(...any) {}
