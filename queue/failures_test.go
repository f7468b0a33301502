package queue_test

import (
	"context"
	"errors"
	"slices"
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
