package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// TestGroupAggregator: tasks enqueued with asynq.Group are aggregating
// (shown in the statistics) until RunWorker's aggregator makes one task
// of them, which runs.
func TestGroupAggregator(t *testing.T) {
	e := newQEnv(t)
	c := asynq.NewClientFromRedisClient(e.Client)
	for _, p := range []string{"a", "b", "c"} {
		if _, err := c.Enqueue(asynq.NewTask("item", []byte(p)), asynq.Queue(e.q), asynq.Group("g1")); err != nil {
			t.Fatal(err)
		}
	}
	ctl := queue.NewControl(e.store)
	per, _, err := ctl.Stats(context.Background(), []string{e.q}, nil)
	if err != nil || per[0].Aggregating != 3 {
		t.Fatalf("aggregating = %+v, %v; want 3", per, err)
	}
	cfg := e.config(0)
	cfg.GroupMaxSize = 3
	cfg.GroupGracePeriod = time.Second // asynq's least
	cfg.GroupAggregator = asynq.GroupAggregatorFunc(func(group string, tasks []*asynq.Task) *asynq.Task {
		var parts []string
		for _, t := range tasks {
			parts = append(parts, string(t.Payload()))
		}
		return asynq.NewTask("batch", []byte(group+":"+strings.Join(parts, ",")))
	})
	got := make(chan string, 1)
	e.runWorker(cfg, map[string]asynq.Handler{
		"batch": asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
			got <- string(t.Payload())
			return nil
		}),
	})
	if p := receive(t, got); len(p) != len("g1:a,b,c") || !strings.HasPrefix(p, "g1:") {
		t.Fatalf("aggregated payload %q", p)
	}
}
