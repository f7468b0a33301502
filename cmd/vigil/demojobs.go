package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// Demo task types. A demo worker is steady on its own: it crashes, hangs or
// fails only when a job asks it to.
const (
	demoWork    = "demo:work"    // works for ms milliseconds, reporting progress
	demoFail    = "demo:fail"    // fails (retried, then RETRIES_EXHAUSTED)
	demoInvalid = "demo:invalid" // fails at once (non-retryable)
	demoCrash   = "demo:crash"   // kills its worker on the first run, then works
	demoHang    = "demo:hang"    // freezes its worker on the first run, then works
	demoToxic   = "demo:toxic"   // kills its worker every time: archived as toxic
	// demoReport publishes report.txt (queue.Publish), then kills its worker
	// on the first run before it returns: the retry finds the output and
	// is done without running (short_circuit in its done event).
	demoReport = "demo:report"
)

// demoOutputs declares what each demo task type publishes.
var demoOutputs = map[string][]string{demoReport: {"report.txt"}}

// demoPayload is every demo task's payload.
type demoPayload struct {
	MS int `json:"ms"`
}

func demoTask(typ string, ms int) *asynq.Task {
	b, _ := json.Marshal(demoPayload{MS: ms})
	return asynq.NewTask(typ, b)
}

// demoHandlers are the handlers of `vigil worker --demo`.
func demoHandlers(log *slog.Logger) map[string]asynq.Handler {
	work := func(ctx context.Context, t *asynq.Task) error {
		var p demoPayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("demo payload: %w (%w)", err, queue.ErrNonRetryable)
		}
		const steps = 20
		for i := 1; i <= steps; i++ {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(p.MS) * time.Millisecond / steps):
			}
			_ = queue.Progress(ctx, float64(100*i/steps))
		}
		return nil
	}
	misbehaveOnce := func(what string, act func()) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			if queue.Crashes(ctx) == 0 {
				id, _ := asynq.GetTaskID(ctx)
				log.Warn("demo: a job tells this worker to "+what, "task", id)
				act()
			}
			return work(ctx, t)
		}
	}
	crash := func() { os.Exit(3) }
	freeze := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
	return map[string]asynq.Handler{
		demoWork: asynq.HandlerFunc(work),
		demoFail: asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return errors.New("demo: upstream unavailable")
		}),
		demoInvalid: asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return queue.NonRetryable(errors.New("demo: INPUT_TOO_LARGE"))
		}),
		demoCrash: misbehaveOnce("crash", crash),
		demoReport: asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if err := work(ctx, t); err != nil {
				return err
			}
			id, _ := asynq.GetTaskID(ctx)
			out, err := queue.Publish(ctx, "report.txt", func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "report of task %s\n", id)
				return err
			})
			if err != nil {
				return err
			}
			if queue.Crashes(ctx) == 0 {
				log.Warn("demo: report published, now this worker dies before the task is done: its retry finds the report", "task", id, "output", out.Path)
				crash()
			}
			return nil
		}),
		demoHang: misbehaveOnce("hang", freeze),
		demoToxic: asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			log.Error("demo: a toxic job kills this worker", "task", id, "crashes_so_far", queue.Crashes(ctx))
			crash()
			return nil
		}),
	}
}
