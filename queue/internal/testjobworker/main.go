// Command testjobworker is the worker process of package queue's tests: a
// queue.RunWorker with test handlers, run by a real supervisor.
//
// Handlers (payload in brackets):
//
//	sleep [ms]   sleeps, then succeeds
//	hold         runs until its context ends
//	crash        exits with code 3 (a task that always kills its worker)
//	crash-once   exits with code 3 on its first run, succeeds after
//	noop         succeeds
//	publish [n]  publishes output "out.bin" (n bytes, byte i is i%251) and,
//	             on its first run, exits with code 3 before it returns (a
//	             death after the work): its type declares the output, so
//	             the next run is done without running
//	publish-kill [n]  on its first run SIGKILLs its own process halfway
//	             through writing "out.bin"; later runs publish it whole
//	publish-at [n]  publishes "out.bin" (declared, like publish); with
//	             TESTJOB_CRASH_AT naming a crash point of queue (e.g.
//	             "commit:2") the process SIGKILLs itself there, once: the
//	             file TESTJOB_CRASH_MARKER records that it did
//
// With TESTJOB_LEDGER set, every run is written to a ledger in Redis under
// that prefix: "runs" and "completions" (task → count), "owners" (task →
// pid of the run in progress), and "violations": a run that starts while
// another live process's run of the same task is in progress. Pids of dead
// processes are in the "dead" set (the test's Recoverer adds them before
// requeueing their tasks).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/queue/internal/crashpoint"
)

// Environment of the test worker.
const (
	envLedger        = "TESTJOB_LEDGER"
	envCheckInterval = "TESTJOB_CHECK_INTERVAL"
)

var startScript = redis.NewScript(`
local cur = redis.call("HGET", KEYS[1], ARGV[1])
if cur and redis.call("SISMEMBER", KEYS[2], cur) == 0 then
	redis.call("RPUSH", KEYS[3], ARGV[1] .. " started in " .. ARGV[2] .. " while " .. cur .. " runs it")
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
redis.call("HINCRBY", KEYS[4], ARGV[1], 1)
return 1`)

var endScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then redis.call("HDEL", KEYS[1], ARGV[1]) end
redis.call("HINCRBY", KEYS[2], ARGV[1], 1)
return 1`)

type ledger struct {
	rdb    *redis.Client
	prefix string
	pid    string
}

func (l *ledger) start(ctx context.Context, id string) error {
	if l == nil {
		return nil
	}
	p := l.prefix
	return startScript.Run(context.WithoutCancel(ctx), l.rdb, []string{p + "owners", p + "dead", p + "violations", p + "runs"}, id, l.pid).Err()
}

func (l *ledger) end(ctx context.Context, id string) error {
	if l == nil {
		return nil
	}
	p := l.prefix
	return endScript.Run(context.WithoutCancel(ctx), l.rdb, []string{p + "owners", p + "completions"}, id, l.pid).Err()
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testjobworker:", err)
		os.Exit(2)
	}
	cfg.Logger = log
	if v := os.Getenv(envCheckInterval); v != "" {
		cfg.TaskCheckInterval, _ = time.ParseDuration(v)
	}
	var l *ledger
	if p := os.Getenv(envLedger); p != "" {
		opt, err := redis.ParseURL(cfg.Env.RedisURL)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testjobworker:", err)
			os.Exit(2)
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		l = &ledger{rdb: rdb, prefix: p, pid: strconv.Itoa(os.Getpid())}
	}
	run := func(ctx context.Context, t *asynq.Task, body func() error) error {
		id, _ := asynq.GetTaskID(ctx)
		if err := l.start(ctx, id); err != nil {
			return err
		}
		if err := body(); err != nil {
			return err
		}
		return l.end(ctx, id)
	}
	cfg.Outputs = map[string][]string{"publish": {"out.bin"}, "publish-at": {"out.bin"}}
	if at, marker := os.Getenv("TESTJOB_CRASH_AT"), os.Getenv("TESTJOB_CRASH_MARKER"); at != "" && marker != "" {
		crashpoint.At = func(point string) bool {
			if point != at {
				return false
			}
			if f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
				_ = f.Close()
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // dying
			}
			return false
		}
	}
	publish := func(ctx context.Context, t *asynq.Task, killHalfway bool) error {
		n, _ := strconv.Atoi(string(t.Payload()))
		_, err := queue.Publish(ctx, "out.bin", func(w io.Writer) error {
			buf := make([]byte, 0, 64<<10)
			for i := range n {
				if killHalfway && i == n/2 {
					if _, err := w.Write(buf); err != nil {
						return err
					}
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {} // dying
				}
				buf = append(buf, byte(i%251))
				if len(buf) == cap(buf) {
					if _, err := w.Write(buf); err != nil {
						return err
					}
					buf = buf[:0]
				}
			}
			_, err := w.Write(buf)
			return err
		})
		return err
	}
	handlers := map[string]asynq.Handler{
		"publish": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error {
				if err := publish(ctx, t, false); err != nil {
					return err
				}
				if queue.Crashes(ctx) == 0 {
					os.Exit(3)
				}
				return nil
			})
		}),
		"publish-at": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error { return publish(ctx, t, false) })
		}),
		"publish-kill": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error { return publish(ctx, t, queue.Crashes(ctx) == 0) })
		}),
		"sleep": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error {
				ms, _ := strconv.Atoi(string(t.Payload()))
				select {
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}),
		"hold": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error {
				<-ctx.Done()
				return ctx.Err()
			})
		}),
		"crash": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error {
				os.Exit(3)
				return nil
			})
		}),
		"crash-once": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return run(ctx, t, func() error {
				if queue.Crashes(ctx) == 0 {
					os.Exit(3)
				}
				return nil
			})
		}),
		"noop": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return nil }),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := queue.RunWorker(ctx, cfg, handlers); err != nil {
		fmt.Fprintln(os.Stderr, "testjobworker:", err)
		os.Exit(1)
	}
}
