// Command worker is an example of a user's worker binary for Vigil: the
// handlers are ordinary asynq handlers, and queue.RunWorker does the rest
// (heartbeats, running-task records, crash accounting, progress events,
// graceful shutdown). Run it as a pool's command:
//
//	pools:
//	  - queue: thumbs
//	    workers: 2
//	    command: ["./bin/worker"]
//	    concurrency: 4
//	    task_timeout: 5m
//
// and enqueue with queue.Client (or POST /api/v1/queues/thumbs/jobs):
//
//	c := queue.NewClient(store, queue.ClientConfig{Queues: []string{"thumbs"}})
//	c.Enqueue(ctx, "thumbs", asynq.NewTask("thumbs:resize", payload), asynq.MaxRetry(3))
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// resizeRequest is the payload of a thumbs:resize task.
type resizeRequest struct {
	Image string `json:"image"`
	Sizes []int  `json:"sizes"`
}

// resize is an ordinary asynq handler.
func resize(ctx context.Context, t *asynq.Task) error {
	var req resizeRequest
	if err := json.Unmarshal(t.Payload(), &req); err != nil {
		// Retrying cannot fix a bad payload: fail at once.
		return fmt.Errorf("decode payload: %v: %w", err, queue.ErrNonRetryable)
	}
	// A directory of the task's own: removed on success, kept on failure.
	dir, err := queue.ScratchDir(ctx)
	if err != nil {
		return err
	}
	for i, size := range req.Sizes {
		if err := ctx.Err(); err != nil {
			return err // timeout or shutdown: asynq retries or requeues
		}
		out := filepath.Join(dir, fmt.Sprintf("%d.txt", size))
		if err := os.WriteFile(out, []byte(req.Image), 0o600); err != nil {
			return err // retried, up to the task's MaxRetry
		}
		// Throttled: at most about two events a second per task.
		_ = queue.Progress(ctx, float64(100*(i+1)/len(req.Sizes)))
	}
	return nil
}

func main() {
	cfg, err := queue.WorkerConfigFromEnv() // the VIGIL_* environment the supervisor gives
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = queue.RunWorker(ctx, cfg, map[string]asynq.Handler{
		"thumbs:resize": asynq.HandlerFunc(resize),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
