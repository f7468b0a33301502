package queue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/queue"
)

// TestProgressThrottlingOnAFakeClock drives a handler's Progress calls and
// the clock by hand, and checks which reports reach the event stream.
func TestProgressThrottlingOnAFakeClock(t *testing.T) {
	e := newQEnv(t)
	fake := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	cfg := e.config(0)
	cfg.Clock = fake
	type step struct {
		advance time.Duration
		pct     float64
	}
	steps := make(chan step)
	acks := make(chan error)
	ready := make(chan struct{})
	e.runWorker(cfg, map[string]asynq.Handler{
		"long": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			close(ready)
			for s := range steps {
				acks <- queue.Progress(ctx, s.pct)
			}
			return nil
		}),
	})
	w := e.watch()
	id := e.enqueue(e.client(), "long", "")
	receive(t, ready)
	for i, s := range []step{
		{0, 0.5},                       // 0.5 point, at once: no
		{100 * time.Millisecond, 0.9},  // no
		{400 * time.Millisecond, 0.95}, // 500 ms since the start, and moved: yes
		{10 * time.Millisecond, 1.5},   // no
		{0, 1.95},                      // a point since 0.95: yes
		{0, 1.95},                      // same value: no
		{600 * time.Millisecond, 1.95}, // same value, however late: no
		{0, 60},                        // yes
		{0, 60.2},                      // no
		{499 * time.Millisecond, 60.3}, // no
		{time.Millisecond, 60.4},       // 500 ms since 60: yes
		{0, 100},                       // yes
		{0, 100},                       // no
	} {
		fake.Advance(s.advance)
		steps <- s
		if err := receive(t, acks); err != nil {
			t.Fatalf("step %d: Progress: %v", i, err)
		}
	}
	close(steps)
	w.untilJob(id, queue.StateDone)
	var got []float64
	for _, se := range e.events(queue.JobTopic(e.q, id)) {
		if se.job.State == queue.StateProgress {
			got = append(got, *se.job.Progress)
		}
	}
	if want := []float64{0.95, 1.95, 60, 60.4, 100}; !slices.Equal(got, want) {
		t.Fatalf("progress events %v, want %v", got, want)
	}
	if p, ok, err := queue.ReadProgress(context.Background(), e.store, e.q, id); err != nil || !ok || p != 100 {
		t.Fatalf("ReadProgress = %v, %v, %v", p, ok, err)
	}
	done := e.events(queue.JobTopic(e.q, id))
	if d := done[len(done)-1].job.DurationMS; d != 1610 {
		t.Fatalf("duration on the fake clock %d ms, want 1610", d)
	}
}
