package queue_test

import (
	"context"
	"errors"
	"slices"
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
	if d := ev.ProcessAt - info.NextProcessAt.UnixMilli(); d < -1000 || d > 1000 || ev.MaxRetry != 3 || ev.Type != "t" {
		t.Fatalf("created event %+v, task due at %s", ev, info.NextProcessAt)
	}
	// The same TaskID again: refused before anything is written.
	w = e.watch()
	if _, err := c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("other")), asynq.TaskID("job-1")); !errors.Is(err, asynq.ErrTaskIDConflict) || !queue.IsDuplicate(err) {
		t.Fatalf("TaskID reused: %v", err)
	}
	if news := w.next(0); len(news) != 0 {
		t.Fatalf("events for a refused TaskID: %+v", news)
	}
	// Unique holds: the same task again is a duplicate, and says so; its
	// announcement is followed by NOT_ENQUEUED.
	_, err = c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("p")), asynq.Unique(time.Hour))
	if !queue.IsDuplicate(err) {
		t.Fatalf("duplicate enqueue: %v", err)
	}
	var dup []queue.JobState
	for _, se := range w.next(0) {
		if se.ev.Topic != queue.TopicJobs {
			dup = append(dup, se.job.State)
			if se.job.State == queue.StateError && (se.job.Code != queue.CodeNotEnqueued || !se.job.Final) {
				t.Fatalf("event of the refused duplicate %+v", se.job)
			}
		}
	}
	if !slices.Equal(dup, []queue.JobState{queue.StateCreated, queue.StateError}) {
		t.Fatalf("events of the refused duplicate: %v", dup)
	}
	if info, _ := e.insp.GetQueueInfo(e.q); info.Size != 1 {
		t.Fatalf("queue holds %d tasks, want 1", info.Size)
	}
	// A timeout given by the caller wins over the pool's; asynq's default
	// MaxRetry is the one the created event names.
	w = e.watch()
	info, err = c.Enqueue(ctx, e.q, asynq.NewTask("t", []byte("q")), asynq.Timeout(time.Second))
	if err != nil || info.Timeout != time.Second || info.MaxRetry != 25 {
		t.Fatalf("caller timeout: %+v, %v", info, err)
	}
	if ev := w.untilJob(info.ID, queue.StateCreated); ev.MaxRetry != info.MaxRetry || ev.ProcessAt != 0 {
		t.Fatalf("created event %+v", ev)
	}
}

// A pool's max_retry is given to a task enqueued without one (and named by
// its created event); a task's own MaxRetry wins, 0 included.
func TestEnqueuePoolMaxRetry(t *testing.T) {
	e := newQEnv(t)
	c := queue.NewClient(e.store, queue.ClientConfig{Queues: []string{e.q}, Logger: e.log, MaxRetries: map[string]int{e.q: 2}})
	ctx := context.Background()
	w := e.watch()
	for _, tt := range []struct {
		opts []asynq.Option
		want int
	}{{nil, 2}, {[]asynq.Option{asynq.MaxRetry(7)}, 7}, {[]asynq.Option{asynq.MaxRetry(0)}, 0}} {
		info, err := c.Enqueue(ctx, e.q, asynq.NewTask("t", nil), tt.opts...)
		if err != nil || info.MaxRetry != tt.want {
			t.Fatalf("enqueue %v: %+v, %v; want max_retry %d", tt.opts, info, err, tt.want)
		}
		if ev := w.untilJob(info.ID, queue.StateCreated); ev.MaxRetry != tt.want {
			t.Fatalf("created event %+v, want max_retry %d", ev, tt.want)
		}
	}
}

// TestEnqueueRegistersTheQueueAgain: asynq's client lists a queue in its
// index only on a process's first enqueue to it; after Redis lost its data
// the queue would stay unknown to asynq's Inspector. Each Enqueue lists it.
func TestEnqueueRegistersTheQueueAgain(t *testing.T) {
	e := newQEnv(t)
	c := e.client()
	e.enqueue(c, "t", "")
	ctx := context.Background()
	// What Redis losing its data does to the index.
	if err := e.Client.SRem(ctx, "asynq:queues", e.q).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.insp.GetQueueInfo(e.q); err == nil {
		t.Fatal("GetQueueInfo found a queue missing from the index")
	}
	e.enqueue(c, "t", "")
	info, err := e.insp.GetQueueInfo(e.q)
	if err != nil || info.Pending != 2 {
		t.Fatalf("after a second enqueue by the same client: %+v, %v", info, err)
	}
}
