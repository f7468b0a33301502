package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/server"
)

// TestJobTimeoutAndRetention: a job's detail shows the timeout a worker
// applies (the task's own, else the pool's, capped by max_task_timeout);
// jobs enqueued through Vigil get the pool's retention; a completed job
// answers with its completion time and result.
func TestJobTimeoutAndRetention(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) {
		c.TaskTimeouts = map[string]time.Duration{c.Queues[0]: time.Minute}
		c.MaxTaskTimeouts = map[string]time.Duration{c.Queues[0]: 10 * time.Minute}
		c.Retentions = map[string]time.Duration{c.Queues[0]: time.Hour}
	}})
	c := asynq.NewClientFromRedisClient(h.redis.Client)
	for _, tt := range []struct {
		name string
		opts []asynq.Option
		want float64
		from string
	}{
		{"asynq's implicit 30 min", nil, 60, "pool"},
		{"its own 5 min", []asynq.Option{asynq.Timeout(5 * time.Minute)}, 300, "task"},
		{"its own 1 h, capped", []asynq.Option{asynq.Timeout(time.Hour)}, 600, "max_task_timeout"},
	} {
		info, err := c.Enqueue(asynq.NewTask("t", nil), append(tt.opts, asynq.Queue(h.q1))...)
		if err != nil {
			t.Fatal(err)
		}
		j := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+info.ID), http.StatusOK)
		if j.EffectiveTimeout != tt.want || j.TimeoutSource != tt.from {
			t.Errorf("%s: effective %v s from %q, want %v s from %q", tt.name, j.EffectiveTimeout, j.TimeoutSource, tt.want, tt.from)
		}
	}

	// Enqueued through Vigil: the pool's retention and timeout, explicitly.
	j := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t"}`), http.StatusCreated)
	info, err := asynq.NewInspectorFromRedisClient(h.redis.Client).GetTaskInfo(h.q1, j.ID)
	if err != nil || info.Retention != time.Hour || info.Timeout != time.Minute {
		t.Fatalf("enqueued through Vigil: %+v, %v", info, err)
	}
	// Completed (as asynq's server would), with a result: it answers.
	srv := asynq.NewServerFromRedisClient(h.redis.Client, asynq.Config{Queues: map[string]int{h.q1: 1}, Concurrency: 1,
		LogLevel: asynq.FatalLevel})
	done := make(chan struct{}, 10)
	mux := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		_, err := t.ResultWriter().Write([]byte(`{"ok":true}`))
		done <- struct{}{}
		return err
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err = asynq.NewInspectorFromRedisClient(h.redis.Client).GetTaskInfo(h.q1, j.ID)
		if err == nil && info.State == asynq.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not completed: %+v, %v", info, err)
		}
		select {
		case <-done:
		case <-time.After(50 * time.Millisecond):
		}
	}
	d := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+j.ID), http.StatusOK)
	if d.State != "completed" || d.CompletedAt == 0 || string(d.Result) != `{"ok":true}` || d.RetentionS != 3600 ||
		d.RetainedUntil != d.CompletedAt+3600_000 {
		b, _ := json.Marshal(d)
		t.Fatalf("completed job: %s", b)
	}
}

// TestAggregatingJobs: tasks of asynq groups are counted and listed.
func TestAggregatingJobs(t *testing.T) {
	h := newHarness(t, setup{})
	c := asynq.NewClientFromRedisClient(h.redis.Client)
	for i, g := range []string{"b", "a", "b"} {
		if _, err := c.Enqueue(asynq.NewTask("item", []byte{byte('0' + i)}), asynq.Queue(h.q1), asynq.Group(g)); err != nil {
			t.Fatal(err)
		}
	}
	if q := decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK); q.Aggregating != 3 ||
		len(q.Groups) != 2 || q.Groups[0].Name != "a" || q.Groups[0].Size != 1 || q.Groups[1].Size != 2 {
		t.Fatalf("queue = %+v, want 3 aggregating in groups a (1) and b (2)", q)
	}
	type list struct{ Jobs []server.Job }
	l := decode[list](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=aggregating"), http.StatusOK)
	if len(l.Jobs) != 3 || l.Jobs[0].Group != "a" || l.Jobs[1].Group != "b" || l.Jobs[0].State != "aggregating" {
		t.Fatalf("aggregating jobs = %+v", l.Jobs)
	}
	l = decode[list](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=aggregating&page=2&page_size=2"), http.StatusOK)
	if len(l.Jobs) != 1 || l.Jobs[0].Group != "b" {
		t.Fatalf("page 2 = %+v", l.Jobs)
	}
}
