package queue_test

import (
	"context"
	"slices"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// Milestones: a handler's stages come in order with its progress, between
// processing and done, each with its name, and the last one is kept.
func TestStagesInOrder(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	refused := make(chan error, 1)
	e.runWorker(cfg, map[string]asynq.Handler{
		"video": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			refused <- queue.Stage(ctx, "Bad Name!")
			if err := queue.Stage(ctx, "source:ready"); err != nil {
				return err
			}
			if err := queue.Progress(ctx, 50); err != nil {
				return err
			}
			return queue.Stage(ctx, "uploaded")
		}),
	})
	w := e.watch()
	id := e.enqueue(e.client(), "video", "")
	w.untilJob(id, done)
	if err := <-refused; err == nil {
		t.Error("a stage name with spaces and capitals was accepted")
	}
	want := states(created, processing, queue.StateStage, progress, queue.StateStage, done)
	if got := e.states(id); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	var names []string
	for _, se := range e.events(queue.JobTopic(e.q, id)) {
		if se.job.State == queue.StateStage {
			names = append(names, se.job.Stage)
		}
	}
	if !slices.Equal(names, []string{"source:ready", "uploaded"}) {
		t.Errorf("stages %v", names)
	}
	if s, ok, err := queue.ReadStage(context.Background(), e.store, e.q, id); err != nil || !ok || s != "uploaded" {
		t.Errorf("ReadStage = %q, %v, %v", s, ok, err)
	}
	if err := queue.Stage(context.Background(), "x"); err != queue.ErrNotInTask {
		t.Errorf("outside a task: %v", err)
	}
}
