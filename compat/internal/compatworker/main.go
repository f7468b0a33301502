// Command compatworker is the worker of the compatibility suite (package
// compat): ordinary asynq handlers under queue.RunWorker, as a user's
// worker is.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

func main() {
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compatworker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Tasks enqueued with asynq.Group are aggregated two at a time into a
	// compat:ok task whose payload names the group and its parts.
	cfg.GroupMaxSize, cfg.GroupGracePeriod = 2, time.Second
	cfg.GroupAggregator = asynq.GroupAggregatorFunc(func(group string, tasks []*asynq.Task) *asynq.Task {
		parts := make([]string, len(tasks))
		for i, t := range tasks {
			parts[i] = string(t.Payload())
		}
		slices.Sort(parts)
		return asynq.NewTask("compat:ok", []byte(`"batch:`+group+`:`+strings.Join(parts, ",")+`"`), asynq.Retention(time.Hour))
	})
	err = queue.RunWorker(ctx, cfg, map[string]asynq.Handler{
		// compat:ok completes with a result.
		"compat:ok": asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
			_, err := t.ResultWriter().Write([]byte(`{"ok":true}`))
			return err
		}),
		// compat:fail fails every attempt.
		"compat:fail": asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return errors.New("compat: failing as told")
		}),
		// compat:deadline reports the time its attempt was given.
		"compat:deadline": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			left := int64(-1)
			if dl, ok := ctx.Deadline(); ok {
				left = time.Until(dl).Milliseconds()
			}
			b, _ := json.Marshal(map[string]int64{"left_ms": left})
			_, err := t.ResultWriter().Write(b)
			return err
		}),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "compatworker:", err)
		os.Exit(1)
	}
}
