// Command chaosworker is the pool command of the chaos tests and the fault
// explorer: an ordinary queue.RunWorker whose handlers write every run to
// a ledger kept in a Redis of its own (internal/testledger: CHAOS_LEDGER_URL,
// CHAOS_LEDGER), apart from the Redis under test, so that the ledger
// survives what the tests do to that one (restarts, lost data).
//
// Handlers (payload in brackets):
//
//	sleep [ms]   sleeps, then succeeds; returns early when its context ends
//	crash        exits with code 3 (a task that kills its worker every time)
//	fail         returns an error (asynq retries it, then archives it)
//	hang         never returns, whatever its context says (a hung handler:
//	             asynq gives up on it at the task timeout)
//
// Signals: SIGTERM and SIGINT stop it gracefully; SIGUSR1 makes it exit 0
// at once and SIGUSR2 exit with code 7 (a worker that quits on its own,
// tasks in hand). Every exit on its own terms is written to the ledger's
// exits hash; a process missing there was killed.
//
// With CHAOS_CRASHLOOP_FILE naming a file that exists, the process exits
// with code 1 at once: a pool command in a crash loop until the test
// removes the file.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testledger"
	"github.com/vigil-dev/vigil/queue"
)

const envCrashLoop = "CHAOS_CRASHLOOP_FILE"

// Exit codes of the planned exits.
const (
	codeCrashTask = 3
	codeUSR2      = 7
)

func main() {
	// First of all: a SIGTERM that comes as the process starts (its host
	// shutting down just after it spawned it) is a stop like any other,
	// its exit on record. Installed later, the default action would kill
	// such a process by the signal (exit 143), and the ledger would take it
	// for a worker killed (failover's TestFailover, scenario
	// cluster/kill-queue: `make test-failover ONLY=cluster/kill-queue`).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		now := time.Now()
		termAt.Store(&now)
	}()
	if f := os.Getenv(envCrashLoop); f != "" {
		if _, err := os.Stat(f); err == nil {
			fmt.Fprintln(os.Stderr, "chaosworker: crash loop file present, exiting")
			os.Exit(1)
		}
	}
	l, rdb, err := testledger.OpenFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
	_ = l.Hello(context.Background(), os.Getenv(health.EnvComponent), os.Getenv(health.EnvHost))
	code := 0
	if err := run(ctx, l); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		code = 1
	}
	ran := time.Now()
	_ = l.Exit(context.Background(), "clean:"+strconv.Itoa(code))
	// Where a slow exit spent its time (on a loaded machine a clean exit
	// may be seen seconds late): from SIGTERM to RunWorker's return, then
	// the ledger's write.
	if at := termAt.Load(); at != nil {
		fmt.Fprintf(os.Stderr, "chaosworker: exit %d: SIGTERM to return %s, ledger %s\n", code,
			ran.Sub(*at).Round(time.Millisecond), time.Since(ran).Round(time.Millisecond))
	}
	closing := time.Now()
	_ = rdb.Close()
	if d := time.Since(closing); d > 100*time.Millisecond {
		fmt.Fprintf(os.Stderr, "chaosworker: the ledger's client took %s to close\n", d.Round(time.Millisecond))
	}
	os.Exit(code)
}

// termAt is when SIGTERM (or SIGINT) came, if it did.
var termAt atomic.Pointer[time.Time]

// exitOn makes the process exit at once with code on sig, after telling
// the ledger.
func exitOn(l *testledger.Writer, sig os.Signal, code int) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	go func() {
		<-ch
		_ = l.Exit(context.Background(), "exit:"+strconv.Itoa(code))
		os.Exit(code)
	}()
}

func run(ctx context.Context, l *testledger.Writer) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.TaskCheckInterval = 20 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 200 * time.Millisecond
	cfg.RetryDelay = func(int, error, *asynq.Task) time.Duration { return 50 * time.Millisecond }
	exitOn(l, syscall.SIGUSR1, 0)
	exitOn(l, syscall.SIGUSR2, codeUSR2)

	handlers := map[string]asynq.Handler{
		"sleep": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.Start(ctx, id); err != nil {
				return err
			}
			ms, _ := strconv.Atoi(string(t.Payload()))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return l.End(ctx, id, testledger.OutcomeOK)
			case <-ctx.Done():
				if err := l.End(ctx, id, ctxOutcome(ctx)); err != nil {
					return err
				}
				return ctx.Err()
			}
		}),
		"crash": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.Start(ctx, id); err != nil {
				return err
			}
			os.Exit(codeCrashTask)
			return nil
		}),
		"fail": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.Start(ctx, id); err != nil {
				return err
			}
			if err := l.End(ctx, id, testledger.OutcomeError); err != nil {
				return err
			}
			return errors.New("chaosworker: planned failure")
		}),
		"hang": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.Start(ctx, id); err != nil {
				return err
			}
			select {} // until the process ends
		}),
	}
	return queue.RunWorker(ctx, cfg, handlers)
}

func ctxOutcome(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return testledger.OutcomeDeadline
	}
	return testledger.OutcomeCanceled
}
