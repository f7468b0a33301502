package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/queue"
)

// TestBackpressureStopsThisWorkerOnly: with a deep queue and a loaded host
// the worker stops dequeuing for pause_interval (asynq's queue stays
// unpaused for other hosts), counts the pause, and takes work again once
// the load has dropped.
func TestBackpressureStopsThisWorkerOnly(t *testing.T) {
	e := newQEnv(t)
	c := e.client()
	var ids []string
	for range 5 {
		ids = append(ids, e.enqueue(c, "job", ""))
	}
	fake := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	var load atomic.Value
	load.Store(3.0)
	cfg := e.config(0)
	cfg.Clock = fake
	cfg.Env.Backpressure = health.Backpressure{HighWatermark: 2, LoadThreshold: 1.5, PauseInterval: time.Minute}
	cfg.Load = func() (float64, error) { return load.Load().(float64), nil }
	skips := skipSignals(&cfg)
	started := make(chan string, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			started <- id
			return nil
		}),
	})
	for range 5 {
		receive(t, skips)
	}
	select {
	case id := <-started:
		t.Fatalf("task %s started under backpressure", id)
	default:
	}
	if n := cfg.Metrics.BackpressurePauses.Load(); n != 1 {
		t.Fatalf("pauses counted: %d", n)
	}
	if info, err := e.insp.GetQueueInfo(e.q); err != nil || info.Paused || info.Pending != 5 {
		t.Fatalf("queue under one host's backpressure: %+v, %v", info, err)
	}

	load.Store(0.5)
	w := e.watch()
	fake.Advance(time.Minute)
	for _, id := range ids {
		w.untilJob(id, queue.StateDone)
	}
	if n := cfg.Metrics.BackpressurePauses.Load(); n != 1 {
		t.Fatalf("pauses counted: %d", n)
	}
}

// skipSignals returns a channel that hears each dequeue the worker's gate
// refuses (backpressure, an operator's pause).
func skipSignals(cfg *queue.WorkerConfig) <-chan struct{} {
	skips := make(chan struct{}, 100)
	queue.SetTestHooks(cfg, func() {
		select {
		case skips <- struct{}{}:
		default:
		}
	}, nil)
	return skips
}
