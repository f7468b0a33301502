package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// A worker reports what it counted into its component's stats hash (the
// supervisor's /metrics reads it): heartbeats, jobs by outcome and failures
// by code, added to what earlier processes of the component reported.
func TestWorkerReportsItsCounters(t *testing.T) {
	e := newQEnv(t)
	id := health.ComponentID{Queue: e.q, Slot: 0}
	// An earlier process of this component reported 5 heartbeats.
	if err := e.Client.HSet(context.Background(), e.store.Keys().WorkerStats(id), queue.StatHeartbeats, 5).Err(); err != nil {
		t.Fatal(err)
	}
	w := e.watch()
	stop := e.runWorker(e.config(0), map[string]asynq.Handler{
		"ok":  asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		"bad": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return queue.NonRetryable(errors.New("no")) }),
	})
	c := e.client()
	ok, bad := e.enqueue(c, "ok", ""), e.enqueue(c, "bad", "", asynq.MaxRetry(0))
	w.untilJob(ok, queue.StateDone)
	w.untilJob(bad, queue.StateError)
	// At least one heartbeat written (one may fail on a loaded machine).
	w.until("a heartbeat", waitTimeout, func([]streamEvent) bool {
		c, err := e.store.Get(context.Background(), id)
		return err == nil && !c.LastHeartbeat.IsZero()
	})
	if err := stop(); err != nil { // the last report is written on the way out
		t.Fatal(err)
	}
	stats, err := queue.ReadWorkerStats(context.Background(), e.store, []health.ComponentID{id, {Queue: e.q, Slot: 9}})
	if err != nil {
		t.Fatal(err)
	}
	s := stats[0]
	if s[queue.StatHeartbeats] < 6 || s[queue.StatJobsDone] != 1 || s.Failures()[queue.CodeNonRetryable] != 1 ||
		s.Failures()[queue.CodeRetry] != 0 || s[queue.StatInflight] != 0 {
		t.Fatalf("stats %v", s)
	}
	if len(stats[1]) != 0 {
		t.Fatalf("a component that never reported: %v", stats[1])
	}
}
