package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// queue.Recovering opens a recovering window from a handler: the record
// says recovering, the key outlives the TTL, no ordinary beat ends the
// window while the task runs; once it returns the next beat makes the
// worker healthy (issue 20).
func TestRecoveringWindowInTask(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	opened, release := make(chan error, 1), make(chan struct{})
	e.runWorker(cfg, map[string]asynq.Handler{
		"load": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			opened <- queue.Recovering(ctx, 10*time.Second, "loading model")
			<-release
			return nil
		}),
	})
	id := health.ComponentID{Queue: e.q}
	e.enqueue(e.client(), "load", "")
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := e.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != health.StatusRecovering || c.Reason != "loading model" {
		t.Fatalf("record %s %q, want recovering, loading model", c.Status, c.Reason)
	}
	ttl := e.Client.PTTL(ctx, e.store.Keys().Heartbeat(id)).Val()
	if ttl <= cfg.Env.HeartbeatTTL {
		t.Errorf("heartbeat key lives %v, not longer than the TTL %v", ttl, cfg.Env.HeartbeatTTL)
	}
	// Ten heartbeat intervals: no ordinary beat ended the window.
	for deadline := time.Now().Add(10 * cfg.Env.HeartbeatInterval); time.Now().Before(deadline); {
		if c, err := e.store.Get(ctx, id); err != nil || c.Status != health.StatusRecovering {
			t.Fatalf("window ended while the task ran: %s, %v", c.Status, err)
		}
		time.Sleep(cfg.Env.HeartbeatInterval / 2) // polling Redis for an absence, not waiting for a goroutine
	}
	close(release)
	c = waitComponent(t, e, id, func(c health.Component) bool { return c.Status == health.StatusHealthy })
	if c.Reason != "" || !c.RecoveringUntil.IsZero() {
		t.Errorf("healthy again with reason %q until %v", c.Reason, c.RecoveringUntil)
	}
	if err := queue.Recovering(ctx, time.Minute, "x"); err != queue.ErrNotInTask {
		t.Errorf("outside a task: %v", err)
	}
}

func waitComponent(tb testing.TB, e *qenv, id health.ComponentID, ok func(health.Component) bool) health.Component {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := e.store.Get(context.Background(), id)
		if err == nil && ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s (last %+v, %v)", id, c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
