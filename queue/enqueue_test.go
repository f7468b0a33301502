package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

func TestEnqueueRefusesBadInputAndEnqueuesNothing(t *testing.T) {
	e := newQEnv(t)
	c := queue.NewClient(e.store, queue.ClientConfig{Queues: []string{e.q}, MaxPayload: 16, Logger: e.log})
	ctx := context.Background()
	task := func(payload string) *asynq.Task { return asynq.NewTask("t", []byte(payload)) }
	tests := []struct {
		name  string
		q     string
		task  *asynq.Task
		opts  []asynq.Option
		want  error
		words string
	}{
		{"unknown queue", "other", task("x"), nil, queue.ErrUnknownQueue, `"other"`},
		{"invalid queue name", "a:b", task("x"), nil, health.ErrInvalidName, "queue"},
		{"payload over the limit", e.q, task(strings.Repeat("x", 17)), nil, queue.ErrPayloadTooLarge, "17 bytes, the limit is 16"},
		{"negative delay", e.q, task("x"), []asynq.Option{asynq.ProcessIn(-time.Second)}, queue.ErrNegativeDelay, "-1s"},
		{"no type", e.q, asynq.NewTask("", nil), nil, queue.ErrInvalidTask, "type"},
		{"nil task", e.q, nil, nil, queue.ErrInvalidTask, "type"},
		{"queue option for another queue", e.q, task("x"), []asynq.Option{asynq.Queue("other")}, queue.ErrInvalidTask, `"other"`},
		{"task id unfit for a topic", e.q, task("x"), []asynq.Option{asynq.TaskID("a:b")}, queue.ErrInvalidTask, "task id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := e.watch()
			info, err := c.Enqueue(ctx, tt.q, tt.task, tt.opts...)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.words) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.want, tt.words)
			}
			if info != nil {
				t.Fatalf("info %+v for a refused task", info)
			}
			if news := w.next(0); len(news) != 0 {
				t.Fatalf("events for a refused task: %+v", news)
			}
		})
	}
	if qs, _ := e.insp.Queues(); len(qs) > 0 {
		for _, q := range qs {
			if q == e.q || q == "other" {
				info, _ := e.insp.GetQueueInfo(q)
				if info != nil && info.Size > 0 {
					t.Fatalf("queue %s holds %d tasks after refused enqueues", q, info.Size)
				}
			}
		}
	}
}

func TestEnqueueKeepsAsynqOptions(t *testing.T) {
	e := newQEnv(t)
	c := queue.NewClient(e.store, queue.ClientConfig{Queues: []string{e.q}, Logger: e.log,
		TaskTimeouts: map[string]time.Duration{e.q: 90 * time.Second}})
	ctx := context.Background()
	w := e.watch()
	info, err := c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("p")), asynq.TaskID("job-1"), asynq.MaxRetry(3),
		asynq.ProcessIn(time.Hour), asynq.Unique(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "job-1" || info.MaxRetry != 3 || info.State != asynq.TaskStateScheduled || info.Queue != e.q {
		t.Fatalf("info %+v", info)
	}
	if info.Timeout != 90*time.Second {
		t.Fatalf("pool timeout not applied: %s", info.Timeout)
	}
	ev := w.untilJob("job-1", queue.StateCreated)
	if ev.ProcessAt != info.NextProcessAt.UnixMilli() || ev.MaxRetry != 3 || ev.Type != "t" {
		t.Fatalf("created event %+v", ev)
	}
	// Unique holds: the same task again is a duplicate, and says so.
	_, err = c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("p")), asynq.Unique(time.Hour))
	if !queue.IsDuplicate(err) {
		t.Fatalf("duplicate enqueue: %v", err)
	}
	// A timeout given by the caller wins over the pool's.
	info, err = c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("q")), asynq.Timeout(time.Second))
	if err != nil || info.Timeout != time.Second {
		t.Fatalf("caller timeout: %+v, %v", info, err)
	}
}
