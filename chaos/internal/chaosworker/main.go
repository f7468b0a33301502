// Command chaosworker is the pool command of the chaos tests: an ordinary
// queue.RunWorker whose handlers write every run to a ledger kept in a
// Redis of its own (CHAOS_LEDGER_URL), apart from the Redis under test, so
// that the ledger survives what the tests do to that one (restarts, lost
// data).
//
// Handlers (payload in brackets):
//
//	sleep [ms]   sleeps, then succeeds; returns early when its context ends
//	crash        exits with code 3 (a task that kills its worker every time)
//
// Ledger keys, under the prefix CHAOS_LEDGER:
//
//	runs         hash task → handler starts
//	completions  hash task → handler successes
//	completers   hash task → comma-separated pids that completed it
//	first_done   hash task → when it first completed (Unix ms)
//	owners       hash task → pid whose handler is inside it now
//	violations   list: a handler that started while another live
//	             process's handler was still inside the same task
//
// An owner entry goes when its handler returns, whatever the outcome; a
// killed process leaves it behind, and a later start finds it but also
// finds that process gone (by /proc, zombies counting as gone), which is
// no violation.
//
// With CHAOS_CRASHLOOP_FILE naming a file that exists, the process exits
// with code 1 at once: a pool command in a crash loop until the test
// removes the file.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/queue"
)

// Environment of the chaos worker.
const (
	envLedgerURL = "CHAOS_LEDGER_URL"
	envLedger    = "CHAOS_LEDGER"
	envCrashLoop = "CHAOS_CRASHLOOP_FILE"
)

// startScript records a start and returns the owner it replaced ("" for
// none). KEYS: owners, runs. ARGV: task, pid.
var startScript = redis.NewScript(`
local cur = redis.call("HGET", KEYS[1], ARGV[1])
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
redis.call("HINCRBY", KEYS[2], ARGV[1], 1)
if cur and cur ~= ARGV[2] then return cur end
return ""`)

// endScript drops this pid's owner entry and, for a success, counts the
// completion, who made it and when. KEYS: owners, completions,
// completers, first_done. ARGV: task, pid, "1" for a success, now (Unix ms).
var endScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then redis.call("HDEL", KEYS[1], ARGV[1]) end
if ARGV[3] == "1" then
	redis.call("HINCRBY", KEYS[2], ARGV[1], 1)
	redis.call("HSETNX", KEYS[4], ARGV[1], ARGV[4])
	local by = redis.call("HGET", KEYS[3], ARGV[1])
	if by then by = by .. "," .. ARGV[2] else by = ARGV[2] end
	redis.call("HSET", KEYS[3], ARGV[1], by)
end
return 1`)

type ledger struct {
	rdb    *redis.Client
	prefix string
	pid    string
}

func (l *ledger) key(name string) string { return l.prefix + name }

// start records that this process's handler entered task id, and a
// violation if another live process's handler is still inside it.
func (l *ledger) start(ctx context.Context, id string) error {
	ctx = context.WithoutCancel(ctx)
	prev, err := startScript.Run(ctx, l.rdb, []string{l.key("owners"), l.key("runs")}, id, l.pid).Text()
	if err != nil {
		return fmt.Errorf("ledger start %s: %w", id, err)
	}
	if prev == "" {
		return nil
	}
	if pid, _ := strconv.Atoi(prev); livePeer(pid, l.prefix) {
		msg := fmt.Sprintf("%s started in %s while %s runs it", id, l.pid, prev)
		return l.rdb.RPush(ctx, l.key("violations"), msg).Err()
	}
	return nil
}

// end records that the handler left task id, completing it if ok.
func (l *ledger) end(ctx context.Context, id string, ok bool) error {
	flag := "0"
	if ok {
		flag = "1"
	}
	keys := []string{l.key("owners"), l.key("completions"), l.key("completers"), l.key("first_done")}
	if err := endScript.Run(context.WithoutCancel(ctx), l.rdb, keys, id, l.pid, flag, time.Now().UnixMilli()).Err(); err != nil {
		return fmt.Errorf("ledger end %s: %w", id, err)
	}
	return nil
}

// livePeer reports whether pid is a running (not zombie) chaos worker of
// the same ledger: a recycled pid is not taken for one.
func livePeer(pid int, prefix string) bool {
	if pid <= 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	env, err := os.ReadFile(dir + "/environ")
	if err != nil {
		return false
	}
	return bytes.Contains(append(env, 0), []byte(envLedger+"="+prefix+"\x00"))
}

func main() {
	if f := os.Getenv(envCrashLoop); f != "" {
		if _, err := os.Stat(f); err == nil {
			fmt.Fprintln(os.Stderr, "chaosworker: crash loop file present, exiting")
			os.Exit(1)
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.TaskCheckInterval = 20 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 200 * time.Millisecond
	cfg.RetryDelay = func(int, error, *asynq.Task) time.Duration { return 50 * time.Millisecond }

	opt, err := redis.ParseURL(os.Getenv(envLedgerURL))
	if err != nil {
		return fmt.Errorf("%s: %w", envLedgerURL, err)
	}
	if os.Getenv(envLedger) == "" {
		return errors.New(envLedger + " is not set")
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	l := &ledger{rdb: rdb, prefix: os.Getenv(envLedger), pid: strconv.Itoa(os.Getpid())}

	handlers := map[string]asynq.Handler{
		"sleep": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.start(ctx, id); err != nil {
				return err
			}
			ms, _ := strconv.Atoi(string(t.Payload()))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return l.end(ctx, id, true)
			case <-ctx.Done():
				if err := l.end(ctx, id, false); err != nil {
					return err
				}
				return ctx.Err()
			}
		}),
		"crash": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			if err := l.start(ctx, id); err != nil {
				return err
			}
			os.Exit(3)
			return nil
		}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return queue.RunWorker(ctx, cfg, handlers)
}
