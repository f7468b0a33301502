package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

func serveCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML configuration file (DESIGN.md §10)")
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := loadConfig(*path, flags)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, log, nil)
}

// loadConfig reads the file, then the environment, then the flags, and
// checks the result.
func loadConfig(path string, flags *config.Flags) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, err
	}
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := flags.Apply(&cfg); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// serve runs Vigil until ctx ends. started, if set, is called once the
// supervisor runs.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, started func(*supervisor.Supervisor)) error {
	url := cfg.Redis
	if url == "" {
		m, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		defer m.Close()
		url = "redis://" + m.Addr()
		log.Warn("no redis configured: using an embedded in-memory Redis; all state is lost when vigil exits", "addr", m.Addr())
	}
	rdb, err := redisconn.Open(url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := redisconn.Ping(ctx, rdb, 2*time.Second); err != nil {
		return err
	}
	store := health.NewStore(rdb, cfg.Prefix, 0)
	// Before anything is written: a newer key layout is refused (the
	// supervisor checks again when it starts, for embedding programs).
	if _, err := store.CheckSchema(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("admin server: %w", err)
	}
	defer ln.Close()
	// Pause flags written while this host was away hold (DESIGN.md §6).
	queues := make([]string, len(cfg.Pools))
	for i, p := range cfg.Pools {
		queues[i] = p.Queue
	}
	if err := queue.NewControl(store).Apply(ctx, queues); err != nil {
		return err
	}
	m, err := newMetrics(cfg, store, queues, log)
	if err != nil {
		return err
	}
	alerts, stopAlerts, err := startAlerts(cfg, log, m)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer stopAlerts()
	sup, err := supervisor.New(supervisor.Config{
		Host:        cfg.Host,
		RedisURL:    url,
		Prefix:      cfg.Prefix,
		Pools:       cfg.SupervisorPools(),
		Heartbeat:   cfg.HeartbeatConfig(),
		Policy:      cfg.PolicyConfig(),
		StopTimeout: time.Duration(cfg.StopTimeout),
		Lease:       time.Duration(cfg.Lease),
		Capacity:    cfg.Capacity,
		Address:     ln.Addr().String(),
		Version:     version,
		Stats:       queueStats(store),
		Recoverer:   queue.NewRecoverer(store, queue.RecovererConfig{Logger: log}),
		Alerts:      alerts,
		Metrics:     m,
		Logger:      log,
	}, store)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := sup.Start(ctx); err != nil {
		return err
	}
	log.Info("vigil running", "version", version, "host", sup.Config().Host, "redis", redisconn.Describe(url), "pools", len(cfg.Pools))
	srv, err := adminServer(cfg, store, sup, log)
	if err != nil {
		_ = sup.Stop(context.Background())
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("admin server listening", "url", "http://"+ln.Addr().String()+"/", "docs", "http://"+ln.Addr().String()+"/docs")
	if started != nil {
		started(sup)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("admin server stopped", "err", err)
	}
	log.Info("shutting down: stopping workers", "stop_timeout", cfg.StopTimeout)
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	defer hcancel()
	if err := srv.Shutdown(hctx); err != nil {
		_ = srv.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.StopTimeout)+2*time.Second)
	defer cancel()
	if err := sup.Stop(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// adminServer builds the HTTP server of the admin API (DESIGN.md §7).
func adminServer(cfg config.Config, store *health.Store, sup *supervisor.Supervisor, log *slog.Logger) (*http.Server, error) {
	queues := make([]string, len(cfg.Pools))
	timeouts := map[string]time.Duration{}
	for i, p := range cfg.Pools {
		queues[i], timeouts[p.Queue] = p.Queue, time.Duration(p.TaskTimeout)
	}
	h, err := server.New(server.Config{
		Store: store, Supervisor: sup, Queues: queues, TaskTimeouts: timeouts,
		Token: cfg.Token, AuthReads: cfg.AuthReads, ReadOnly: cfg.ReadOnly, MaxBody: int64(cfg.MaxBody),
		Version: server.APIVersion, Logger: log, Cluster: sup, MaxPoolSize: cfg.MaxPoolSize, Metrics: sup.Config().Metrics,
		SSE: server.SSEConfig{MaxClients: cfg.SSE.MaxClients, MaxLag: cfg.SSE.MaxLag, KeepAlive: time.Duration(cfg.SSE.KeepAlive)},
	})
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	switch {
	case cfg.ReadOnly:
		log.Info("admin API is read-only: every mutation answers 403")
	case cfg.Token == "":
		log.Warn("no admin token configured: mutations are accepted only from loopback clients (set token / VIGIL_TOKEN)")
	default:
		log.Info("admin API: mutations need the bearer token", "auth_reads", cfg.AuthReads)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Event streams never end by themselves: Shutdown closes them.
	srv.RegisterOnShutdown(func() { _ = h.Close() })
	return srv, nil
}

// startEmbeddedRedis starts a miniredis on a loopback port whose keys expire
// on the real clock, reachable by the worker processes.
func startEmbeddedRedis() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start embedded redis: %w", err)
	}
	return m, nil
}

// queueStats gives the leader the statistics it announces: each queue's,
// and the total under "".
func queueStats(store *health.Store) supervisor.StatsSource {
	control := queue.NewControl(store)
	return func(ctx context.Context, queues []string) (map[string]any, error) {
		cs, err := store.List(ctx)
		if err != nil {
			return nil, err
		}
		live := map[string]int{}
		for _, c := range cs {
			if c.Status == health.StatusHealthy {
				live[c.ID.Queue]++
			}
		}
		per, total, err := control.Stats(ctx, queues, live)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"": total}
		for _, st := range per {
			out[st.Queue] = st
		}
		return out, nil
	}
}
