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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/queue"
)

// workerCmd is the runtime a pool command can be. With --demo it is a real
// asynq worker of the demo jobs (queue.RunWorker), which also obeys the
// commands `vigil demo` pushes to send a worker into a crash loop. Without
// it, it only heartbeats for the component named by its VIGIL_*
// environment until SIGTERM and takes no task: real workers are built with
// queue.RunWorker (see examples/worker).
func workerCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	demo := fs.Bool("demo", false, "run the demo jobs, and obey demo commands sent by vigil demo")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		return err
	}
	env := cfg.Env
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if !*demo {
		return heartbeatOnly(ctx, env, log.With("component", env.Component.String()))
	}
	rdb, err := redisconn.Open(env.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	keys := health.NewKeys(env.Prefix)
	if n := demoCrashLoop(ctx, rdb, keys, env.Component); n > 0 {
		log.Warn("demo: crash loop, exiting at once", "component", env.Component.String(), "left", n-1)
		os.Exit(1)
	}
	cmdCtx, stopCmds := context.WithCancel(ctx)
	defer stopCmds()
	go demoCommands(cmdCtx, rdb, keys, env.Component, log.With("component", env.Component.String()))
	cfg.Logger = log
	cfg.Outputs = demoOutputs
	return queue.RunWorker(ctx, cfg, demoHandlers(log.With("component", env.Component.String())))
}

// heartbeatOnly keeps the component's heartbeat until ctx ends.
func heartbeatOnly(ctx context.Context, env health.WorkerEnv, log *slog.Logger) error {
	rdb, err := redisconn.Open(env.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	hb := &health.Heartbeater{Store: health.NewStore(rdb, env.Prefix, 0), ID: env.Component, PID: os.Getpid(),
		Host: env.Host, StartedAt: time.Now(), Interval: env.HeartbeatInterval, TTL: env.HeartbeatTTL, Logger: log}
	err = hb.Run(ctx)
	if errors.Is(err, health.ErrStale) {
		log.Error("exiting: this process is stale", "err", err)
		return err
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

func demoCrashLoop(ctx context.Context, rdb redis.UniversalClient, k health.Keys, id health.ComponentID) int64 {
	n, err := rdb.Decr(ctx, demoLoopKey(k, id)).Result()
	if err != nil || n < 0 {
		rdb.Del(ctx, demoLoopKey(k, id))
		return 0
	}
	return n + 1
}

// demoCommands obeys "crash N" (exit with code N) and "hang" (freeze the
// whole process: no more heartbeats).
func demoCommands(ctx context.Context, rdb redis.UniversalClient, k health.Keys, id health.ComponentID, log *slog.Logger) {
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
			log.Warn("demo: hanging as told (the process freezes)")
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		default:
			log.Warn("demo: unknown command", "cmd", fmt.Sprint(res[1]))
		}
	}
}
