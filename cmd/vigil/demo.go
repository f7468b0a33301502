package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// demoCmd runs Vigil with no set-up: embedded Redis, three pools of demo
// workers (`vigil worker --demo`), a steady trickle of demo jobs of which
// some fail, crash or hang their worker and one is toxic, one worker
// sent into a crash loop so that it ends failed, and two schedules.
func demoCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.RegisterFlags(fs)
	every := fs.Duration("chaos-every", 4*time.Second, "how often the demo enqueues a job that fails, crashes or hangs its worker")
	jobEvery := fs.Duration("job-every", 300*time.Millisecond, "how often the demo enqueues a job")
	chaosQueues := fs.String("chaos-queues", "", "comma-separated pools that get the jobs that fail, crash or hang their worker, and the toxic one (default: every pool)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find own binary: %w", err)
	}
	cfg := config.Default()
	cfg.Redis = config.RedisEmbedded // unless --redis or VIGIL_REDIS_URL names one
	cfg.Heartbeat = config.Heartbeat{Interval: config.Duration(time.Second), TTL: config.Duration(5 * time.Second), StartTimeout: config.Duration(20 * time.Second)}
	cfg.StopTimeout = config.Duration(3 * time.Second)
	for _, p := range []struct {
		q string
		n int
	}{{"tag", 2}, {"library", 10}, {"calibration", 5}} {
		cfg.Pools = append(cfg.Pools, config.Pool{Queue: p.q, Workers: p.n, Command: []string{exe, "worker", "--demo"},
			Concurrency: 1, TaskTimeout: config.Duration(time.Minute), Backpressure: config.Backpressure{PauseInterval: config.Duration(10 * time.Second)}})
	}
	// Two schedules: one that fires every few seconds, one nightly (run
	// it from the dashboard's schedules view).
	cfg.Schedules = []config.Schedule{
		{Name: "digest", Spec: "@every 5s", Queue: "library", Type: demoWork, Payload: config.Payload(`{"ms":300}`), CatchUp: "last"},
		{Name: "nightly-report", Spec: "CRON_TZ=Europe/Paris 0 2 * * *", Queue: "calibration", Type: demoWork,
			Payload: config.Payload(`{"ms":2000}`), Retention: config.Duration(24 * time.Hour), CatchUp: "none"},
	}
	if err := applyOverrides(&cfg, flags); err != nil {
		return err
	}
	chaosOn, err := demoChaosQueues(cfg, *chaosQueues)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings("", config.Config{}, flags) {
		log.Warn(w)
	}
	return serve(ctx, cfg, log, func(sup *supervisor.Supervisor) {
		go demoChaos(ctx, sup, log, *every)
		go demoJobs(ctx, sup, log, *jobEvery, *every, chaosOn)
	})
}

// demoChaos sends worker:calibration:4 into a crash loop that ends failed,
// once, at the third tick.
func demoChaos(ctx context.Context, sup *supervisor.Supervisor, log *slog.Logger, every time.Duration) {
	rdb := sup.Store().Client()
	keys := sup.Store().Keys()
	loop := health.ComponentID{Queue: "calibration", Slot: 4}
	select {
	case <-ctx.Done():
		return
	case <-time.After(3 * every):
	}
	// Four exits at start after this crash: five crashes within the
	// window, so the policy marks it failed.
	rdb.Set(ctx, demoLoopKey(keys, loop), 4, 10*time.Minute)
	rdb.RPush(ctx, demoCmdKey(keys, loop), "crash 1")
	log.Info("demo: sending a worker into a crash loop", "component", loop.String())
}

// demoChaosQueues returns the pools named in list (comma-separated), or
// every pool when list is empty; a name that is not a pool is an error.
func demoChaosQueues(cfg config.Config, list string) ([]string, error) {
	var pools []string
	for _, p := range cfg.Pools {
		pools = append(pools, p.Queue)
	}
	if strings.TrimSpace(list) == "" {
		return pools, nil
	}
	var qs []string
	for q := range strings.SplitSeq(list, ",") {
		q = strings.TrimSpace(q)
		if !slices.Contains(pools, q) {
			return nil, fmt.Errorf("demo: -chaos-queues: %q is not a pool of the demo (%s)", q, strings.Join(pools, ", "))
		}
		if !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	return qs, nil
}

// demoJobs enqueues a steady trickle of demo jobs, every `every`, on random
// pools: mostly work that reports progress, and now and then (every
// chaosEvery) one that fails, fails for good, crashes its worker or hangs
// it; after 30 s, and then every 5 minutes, a toxic one. Those go to the
// pools of chaosOn only.
func demoJobs(ctx context.Context, sup *supervisor.Supervisor, log *slog.Logger, every, chaosEvery time.Duration, chaosOn []string) {
	cfg := sup.Config()
	queues := make([]string, 0, len(cfg.Pools))
	timeouts := map[string]time.Duration{}
	for _, p := range cfg.Pools {
		queues = append(queues, p.Queue)
		timeouts[p.Queue] = p.TaskTimeout
	}
	c := queue.NewClient(sup.Store(), queue.ClientConfig{Queues: queues, TaskTimeouts: timeouts, Logger: log})
	tick := time.NewTicker(every)
	defer tick.Stop()
	start, lastChaos, lastToxic := time.Now(), time.Now(), time.Time{}
	misbehaving := []string{demoFail, demoInvalid, demoCrash, demoHang, demoReport}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		q := queues[rand.IntN(len(queues))]
		task, opts := demoTask(demoWork, 500+rand.IntN(3500)), []asynq.Option(nil)
		switch now := time.Now(); {
		case now.Sub(start) > 30*time.Second && now.Sub(lastToxic) > 5*time.Minute:
			lastToxic, task = now, demoTask(demoToxic, 0)
			q = chaosOn[rand.IntN(len(chaosOn))]
		case now.Sub(lastChaos) > chaosEvery:
			lastChaos = now
			task, opts = demoTask(misbehaving[rand.IntN(len(misbehaving))], 1000), []asynq.Option{asynq.MaxRetry(2)}
			q = chaosOn[rand.IntN(len(chaosOn))]
		}
		info, err := c.Enqueue(ctx, q, task, opts...)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("demo: enqueue", "queue", q, "err", err)
			}
			continue
		}
		if task.Type() != demoWork {
			log.Info("demo: enqueued a misbehaving job", "queue", q, "type", task.Type(), "task", info.ID)
		}
	}
}
