package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
)

// workerCmd is the runtime a pool command can be: it heartbeats for the
// component named by its VIGIL_* environment until SIGTERM. With --demo it
// also obeys demo commands (crash, hang) pushed by `vigil demo`.
func workerCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	demo := fs.Bool("demo", false, "obey demo commands (crash, hang) sent by vigil demo")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := health.LoadWorkerEnv()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", env.Component.String())
	rdb, err := redisconn.Open(env.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	store := health.NewStore(rdb, env.Prefix, 0)
	hb := &health.Heartbeater{Store: store, ID: env.Component, PID: os.Getpid(), Host: env.Host,
		StartedAt: time.Now(), Interval: env.HeartbeatInterval, TTL: env.HeartbeatTTL, Logger: log}

	beatCtx, stopBeating := context.WithCancel(ctx)
	defer stopBeating()
	if *demo {
		if n := demoCrashLoop(ctx, rdb, store.Keys(), env.Component); n > 0 {
			log.Warn("demo: crash loop, exiting at once", "left", n-1)
			os.Exit(1)
		}
		go demoCommands(beatCtx, rdb, store.Keys(), env.Component, log, stopBeating)
	}
	// On SIGTERM the heartbeater stops; anything still running gets
	// VIGIL_SHUTDOWN_TIMEOUT before the process exits anyway.
	go func() {
		<-ctx.Done()
		time.Sleep(env.ShutdownTimeout)
		log.Error("shutdown timeout: exiting")
		os.Exit(0)
	}()
	err = hb.Run(beatCtx)
	if errors.Is(err, health.ErrStale) {
		log.Error("exiting: this process is stale", "err", err)
		return err
	}
	if beatCtx.Err() != nil && ctx.Err() == nil {
		<-ctx.Done() // demo hang: alive but silent until killed
	}
	log.Info("worker stopped")
	return nil
}

// demoCmdKey is the list `vigil demo` pushes commands to for one worker.
func demoCmdKey(k health.Keys, id health.ComponentID) string {
	return k.Prefix + "demo:{" + id.String() + "}:cmd"
}

// demoLoopKey holds how many more times a demo worker exits at start.
func demoLoopKey(k health.Keys, id health.ComponentID) string {
	return k.Prefix + "demo:{" + id.String() + "}:crashloop"
}

func demoCrashLoop(ctx context.Context, rdb *redis.Client, k health.Keys, id health.ComponentID) int64 {
	n, err := rdb.Decr(ctx, demoLoopKey(k, id)).Result()
	if err != nil || n < 0 {
		rdb.Del(ctx, demoLoopKey(k, id))
		return 0
	}
	return n + 1
}

// demoCommands obeys "crash N" (exit with code N) and "hang" (stop
// heartbeating, stay alive).
func demoCommands(ctx context.Context, rdb *redis.Client, k health.Keys, id health.ComponentID, log *slog.Logger, hang func()) {
	for ctx.Err() == nil {
		res, err := rdb.BLPop(ctx, 2*time.Second, demoCmdKey(k, id)).Result()
		if err != nil || len(res) != 2 {
			continue
		}
		cmd, arg, _ := strings.Cut(res[1], " ")
		switch cmd {
		case "crash":
			code, _ := strconv.Atoi(arg)
			log.Warn("demo: crashing as told", "exit_code", code)
			os.Exit(code)
		case "hang":
			log.Warn("demo: hanging as told (no more heartbeats)")
			hang()
			return
		default:
			log.Warn("demo: unknown command", "cmd", fmt.Sprint(res[1]))
		}
	}
}
