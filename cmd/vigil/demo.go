package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/supervisor"
)

// demoCmd runs Vigil with no set-up: embedded Redis, three pools of demo
// workers, and a driver that now and then makes a worker crash or hang, and
// sends one into a crash loop so that it ends failed.
func demoCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.RegisterFlags(fs)
	every := fs.Duration("chaos-every", 4*time.Second, "how often the demo makes a worker crash or hang")
	if err := fs.Parse(args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find own binary: %w", err)
	}
	cfg := config.Default()
	cfg.Heartbeat = config.Heartbeat{Interval: config.Duration(time.Second), TTL: config.Duration(5 * time.Second), StartTimeout: config.Duration(20 * time.Second)}
	cfg.StopTimeout = config.Duration(3 * time.Second)
	for _, p := range []struct {
		q string
		n int
	}{{"tag", 2}, {"library", 10}, {"calibration", 5}} {
		cfg.Pools = append(cfg.Pools, config.Pool{Queue: p.q, Workers: p.n, Command: []string{exe, "worker", "--demo"},
			Concurrency: 1, TaskTimeout: config.Duration(time.Minute), Backpressure: config.Backpressure{PauseInterval: config.Duration(10 * time.Second)}})
	}
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := flags.Apply(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, log, func(sup *supervisor.Supervisor) {
		go demoChaos(ctx, sup, log, *every)
	})
}

// demoChaos tells random workers to crash or hang, and after a while sends
// worker:calibration:4 into a crash loop that ends failed.
func demoChaos(ctx context.Context, sup *supervisor.Supervisor, log *slog.Logger, every time.Duration) {
	rdb := sup.Store().Client()
	keys := sup.Store().Keys()
	var ids []health.ComponentID
	for _, p := range sup.Config().Pools {
		for s := range p.Workers {
			ids = append(ids, health.ComponentID{Queue: p.Queue, Slot: s})
		}
	}
	loop := health.ComponentID{Queue: "calibration", Slot: 4}
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, cmd := ids[rand.IntN(len(ids))], fmt.Sprintf("crash %d", 1+rand.IntN(3))
		switch {
		case n == 3:
			// Four exits at start after this crash: five crashes within the
			// window, so the policy marks it failed.
			id, cmd = loop, "crash 1"
			rdb.Set(ctx, demoLoopKey(keys, loop), 4, 10*time.Minute)
			log.Info("demo: sending a worker into a crash loop", "component", id.String())
		case n%5 == 0:
			cmd = "hang"
		}
		if id == loop && n != 3 {
			continue
		}
		log.Info("demo: telling a worker to misbehave", "component", id.String(), "cmd", cmd)
		rdb.RPush(ctx, demoCmdKey(keys, id), cmd)
	}
}
