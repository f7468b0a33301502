package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/queue"
)

// An operator's pause of one worker: the worker (started paused: a pause
// outlives its process) takes no task, keeps beating, and takes them again
// once resumed, read at its next report; the queue itself is not paused.
func TestWorkerPause(t *testing.T) {
	e := newQEnv(t)
	c := e.client()
	var ids []string
	for range 3 {
		ids = append(ids, e.enqueue(c, "job", ""))
	}
	cfg := e.config(0)
	id := cfg.Env.Component
	if ok, err := e.store.PauseWorker(context.Background(), id, health.WorkerPause{At: time.Now(), By: "ops", Reason: "disk check"}); err != nil || !ok {
		t.Fatalf("PauseWorker: %v %v", ok, err)
	}
	fake := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	cfg.Clock = fake
	skips := skipSignals(&cfg)
	started := make(chan string, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			tid, _ := asynq.GetTaskID(ctx)
			started <- tid
			return nil
		}),
	})
	for range 5 {
		receive(t, skips)
	}
	select {
	case tid := <-started:
		t.Fatalf("task %s started on a paused worker", tid)
	default:
	}
	if info, err := e.insp.GetQueueInfo(e.q); err != nil || info.Paused || info.Pending != 3 {
		t.Fatalf("queue: %+v, %v", info, err)
	}
	pauses, err := e.store.WorkerPauses(context.Background(), []health.ComponentID{id})
	if p, ok := pauses[id]; err != nil || !ok || p.By != "ops" || p.Reason != "disk check" {
		t.Fatalf("WorkerPauses: %+v %v", pauses, err)
	}
	if again, _ := e.store.PauseWorker(context.Background(), id, health.WorkerPause{By: "other"}); again {
		t.Error("a second pause reported a change")
	}

	if ok, err := e.store.ResumeWorker(context.Background(), id); err != nil || !ok {
		t.Fatalf("ResumeWorker: %v %v", ok, err)
	}
	w := e.watch()
	fake.Advance(cfg.Env.HeartbeatInterval) // the next report reads the pause
	for _, tid := range ids {
		w.untilJob(tid, queue.StateDone)
	}
}
