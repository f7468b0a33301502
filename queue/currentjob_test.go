package queue_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
)

// The component record's current_job names the task the worker runs, and
// is cleared once it ends.
func TestCurrentJob(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	running, release := make(chan struct{}), make(chan struct{})
	e.runWorker(cfg, map[string]asynq.Handler{
		"hold": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			close(running)
			<-release
			return nil
		}),
	})
	w := e.watch()
	id := e.enqueue(e.client(), "hold", "")
	w.untilJob(id, processing)
	<-running
	key := e.store.Keys().Component(cfg.Env.Component)
	if got := e.Client.HGet(context.Background(), key, health.FieldCurrentJob).Val(); got != id {
		t.Fatalf("current_job while running = %q, want %q", got, id)
	}
	close(release)
	w.untilJob(id, done)
	if got := e.Client.HGet(context.Background(), key, health.FieldCurrentJob).Val(); got != "" {
		t.Fatalf("current_job = %q after the task ended", got)
	}
}
