package queue_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

func TestStatsAverageAndETA(t *testing.T) {
	e := newQEnv(t)
	never := e.q + "x" // a configured queue asynq has never seen
	cfg := e.config(0)
	e.runWorker(cfg, map[string]asynq.Handler{
		"sleep": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
		"fail": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("no") }),
	})
	c := e.client()
	w := e.watch()
	var last string
	for i := range 5 {
		var opts []asynq.Option
		if i < 2 { // asynq keeps these two once completed
			opts = append(opts, asynq.Retention(time.Hour))
		}
		last = e.enqueue(c, "sleep", "", opts...)
	}
	failed := e.enqueue(c, "fail", "", asynq.MaxRetry(0))
	w.untilJob(last, queue.StateDone)
	w.untilJob(failed, queue.StateError)
	waitArchived(t, e, failed)

	ctl := queue.NewControl(e.store)
	ctx := context.Background()
	if _, err := ctl.PauseQueue(ctx, e.q, queue.Actor{}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		e.enqueue(c, "sleep", "")
	}
	per, total, err := ctl.Stats(ctx, []string{e.q, never}, map[string]int{e.q: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := per[0]
	// asynq's meaning for each state's name: completed is what asynq keeps
	// (Retention), the totals count attempts.
	if s.Completed != 2 || s.ProcessedTotal != 6 || s.FailedTotal != 1 || s.Archived != 1 || s.Pending != 4 ||
		!s.Paused || s.LiveWorkers != 2 || s.ProcessedToday != 6 || s.FailedToday != 1 {
		t.Fatalf("stats %+v", s)
	}
	info, err := e.insp.GetQueueInfo(e.q)
	if err != nil {
		t.Fatal(err)
	}
	if s.Completed != info.Completed || s.Pending != info.Pending || s.Archived != info.Archived ||
		s.ProcessedTotal != info.ProcessedTotal || s.FailedTotal != info.FailedTotal || s.Paused != info.Paused {
		t.Fatalf("Vigil %+v, asynq %+v", s, info)
	}
	if s.AvgJobMS < 15 || s.AvgJobMS > 2000 {
		t.Fatalf("average job time %.1f ms for 20 ms jobs", s.AvgJobMS)
	}
	if want := 4 * s.AvgJobMS / 2 / 1000; s.ETASeconds != want {
		t.Fatalf("ETA %.3f s, want %.3f", s.ETASeconds, want)
	}
	if z := per[1]; z.Queue != never || z.Pending != 0 || z.Completed != 0 || z.AvgJobMS != 0 {
		t.Fatalf("unseen queue %+v", z)
	}
	// The total's average is weighted by processed jobs: with one busy queue
	// it is that queue's, up to floating-point rounding.
	if total.Completed != 2 || total.ProcessedTotal != 6 || total.Pending != 4 || math.Abs(total.AvgJobMS-s.AvgJobMS) > 1e-9 {
		t.Fatalf("total %+v", total)
	}
}
