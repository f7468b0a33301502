package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

func TestTimeoutOf(t *testing.T) {
	const m = time.Minute
	for _, tt := range []struct {
		name        string
		own         time.Duration
		hasDeadline bool
		pool, max   time.Duration
		want        time.Duration
		from        string
	}{
		{"own timeout wins over the pool's", 5 * m, false, m, 0, 5 * m, queue.TimeoutFromTask},
		{"own timeout shorter than the pool's", 10 * time.Second, false, m, 0, 10 * time.Second, queue.TimeoutFromTask},
		{"asynq's implicit 30 min: the pool's", queue.AsynqDefaultTimeout, false, m, 0, m, queue.TimeoutFromPool},
		{"asynq's 30 min cannot be lengthened", queue.AsynqDefaultTimeout, false, 2 * time.Hour, 0, queue.AsynqDefaultTimeout, queue.TimeoutFromAsynqDefault},
		{"30 min with a deadline is the task's", queue.AsynqDefaultTimeout, true, m, 0, queue.AsynqDefaultTimeout, queue.TimeoutFromTask},
		{"deadline only", 0, true, m, 0, 0, queue.TimeoutFromDeadline},
		{"max caps the task's own", 5 * m, false, m, 2 * m, 2 * m, queue.TimeoutFromMax},
		{"max caps a deadline", 0, true, m, 2 * m, 2 * m, queue.TimeoutFromMax},
		{"max above the pool's", queue.AsynqDefaultTimeout, false, m, 2 * m, m, queue.TimeoutFromPool},
	} {
		d, from := queue.TimeoutOf(tt.own, tt.hasDeadline, tt.pool, tt.max)
		if d != tt.want || from != tt.from {
			t.Errorf("%s: TimeoutOf = %v %s, want %v %s", tt.name, d, from, tt.want, tt.from)
		}
	}
}

// TestTaskTimeoutIsADefault: tasks enqueued with asynq's own Client keep
// their own Timeout over the pool's task_timeout (which applies to tasks
// with none, i.e. asynq's implicit 30 minutes), and max_task_timeout caps
// both.
func TestTaskTimeoutIsADefault(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 3
	cfg.Env.TaskTimeout = 2 * time.Second
	cfg.Env.MaxTaskTimeout = 10 * time.Second
	left := make(chan [2]any, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"t": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			dl, ok := ctx.Deadline()
			if !ok {
				left <- [2]any{id, time.Duration(-1)}
				return nil
			}
			left <- [2]any{id, time.Until(dl)}
			return nil
		}),
	})
	c := asynq.NewClientFromRedisClient(e.Client) // plain asynq, no Vigil option
	enq := func(opts ...asynq.Option) string {
		t.Helper()
		info, err := c.Enqueue(asynq.NewTask("t", nil), append(opts, asynq.Queue(e.q))...)
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	own5 := enq(asynq.Timeout(5 * time.Second))
	own30 := enq(asynq.Timeout(30 * time.Second))
	none := enq()
	got := map[string]time.Duration{}
	for range 3 {
		r := receive(t, left)
		got[r[0].(string)] = r[1].(time.Duration)
	}
	check := func(name, id string, lo, hi time.Duration) {
		t.Helper()
		if d := got[id]; d <= lo || d > hi {
			t.Errorf("%s: %v left when the handler began, want (%v, %v]", name, d, lo, hi)
		}
	}
	check("own 5 s over the pool's 2 s", own5, 3*time.Second, 5*time.Second)
	check("own 30 s capped by max 10 s", own30, 5*time.Second, 10*time.Second)
	check("no timeout of its own: the pool's 2 s", none, 0, 2*time.Second)
}
