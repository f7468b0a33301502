package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
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
	cfg, file, err := loadConfig(*path, flags)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings(*path, file, flags) {
		log.Warn(w)
	}
	return serve(ctx, cfg, log, nil)
}

// loadConfig reads the file, then the environment, then the flags, then
// the secret files, and checks the result. It returns the file's own
// settings too (for Warnings).
func loadConfig(path string, flags *config.Flags) (cfg, file config.Config, err error) {
	if cfg, err = config.Load(path); err != nil {
		return cfg, file, err
	}
	file = cfg
	if err := applyOverrides(&cfg, flags); err != nil {
		return cfg, file, err
	}
	return cfg, file, nil
}

// applyOverrides applies the environment, the flags and the secret files,
// and checks the result.
func applyOverrides(cfg *config.Config, flags *config.Flags) error {
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := flags.Apply(cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.ReadSecretFiles(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// serve runs Vigil until ctx ends. started, if set, is called once the
// supervisor runs.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, started func(*supervisor.Supervisor)) error {
	// go-redis's own lines (reconnects, a new Sentinel master) go through
	// slog too: --log-format json stays JSON.
	redisconn.SetLogger(log)
	url := cfg.Redis
	switch url {
	case "":
		return fmt.Errorf("config: redis: %w", config.ErrNoRedis)
	case config.RedisEmbedded:
		m, password, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		defer m.Close()
		// The workers get the password in their URL; another vigil of the
		// same user may join with --redis-file (a 0600 file in a 0700
		// directory); nobody else.
		url = "redis://:" + password + "@" + m.Addr()
		file, remove, err := writeRedisFile(url)
		if err != nil {
			return err
		}
		defer remove()
		log.Warn("redis: embedded: using an embedded in-memory Redis (random password, handed to the workers); all state is lost when vigil exits",
			"addr", m.Addr(), "redis_file", file)
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
	// The leader fires the schedules; the supervisor's leader step says
	// who leads (sched is set before the supervisor starts).
	var sched *schedule.Scheduler
	sup, err := supervisor.New(supervisor.Config{
		Host:        cfg.Host,
		RedisURL:    url,
		Prefix:      cfg.Prefix,
		Pools:       cfg.SupervisorPools(),
		InheritEnv:  cfg.InheritEnv,
		LogTail:     int(cfg.WorkerOutput.Tail),
		MaxLogLine:  int(cfg.WorkerOutput.MaxLine),
		Heartbeat:   cfg.HeartbeatConfig(),
		Policy:      cfg.PolicyConfig(),
		StopTimeout: time.Duration(cfg.StopTimeout),
		Lease:       time.Duration(cfg.Lease),
		Capacity:    cfg.Capacity,
		MaxPoolSize: cfg.MaxPoolSize,
		Address:     ln.Addr().String(),
		Version:     version,
		Stats:       queueStats(store),
		Recoverer:   queue.NewRecoverer(store, queue.RecovererConfig{Logger: log}),
		Alerts:      alerts,
		Metrics:     m,
		Logger:      log,
		OnLeader:    func(leading bool, until time.Time) { sched.Leading(leading, until) },
	}, store)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	schedules, err := startSchedules(ctx, cfg, store, sup.Config().Host, m, log)
	if err != nil {
		return err
	}
	sched = schedules.scheduler
	// After the supervisor's Stop: it says first that it no longer leads.
	defer sched.Stop()
	if err := sup.Start(ctx); err != nil {
		return err
	}
	log.Info("vigil running", "version", version, "host", sup.Config().Host, "redis", redisconn.Describe(url),
		"redis_tls", redisconn.UsesTLS(url), "pools", len(cfg.Pools))
	srv, err := adminServer(cfg, store, sup, schedules.store, log)
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
func adminServer(cfg config.Config, store *health.Store, sup *supervisor.Supervisor, schedules *schedule.Store, log *slog.Logger) (*http.Server, error) {
	queues := make([]string, len(cfg.Pools))
	timeouts := map[string]time.Duration{}
	for i, p := range cfg.Pools {
		queues[i], timeouts[p.Queue] = p.Queue, time.Duration(p.TaskTimeout)
	}
	proxies, err := cfg.TrustedProxyPrefixes()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	h, err := server.New(server.Config{
		Store: store, Supervisor: sup, Queues: queues, TaskTimeouts: timeouts,
		Token: cfg.Token, AuthReads: cfg.AuthReads, ReadOnly: cfg.ReadOnly, MaxBody: int64(cfg.MaxBody),
		ListenHosts: cfg.ListenHosts(), TrustedProxies: proxies, CookieSecure: cfg.CookieSecure,
		PayloadPreview: int(cfg.JobView.PayloadPreview), MaxPayloadShown: int(cfg.JobView.MaxPayload), ReadBudget: int64(cfg.JobView.ReadBudget),
		Version: server.APIVersion, Logger: log, Cluster: sup, MaxPoolSize: cfg.MaxPoolSize, Metrics: sup.Config().Metrics,
		Schedules: schedules, SSE: server.SSEConfig{MaxClients: cfg.SSE.MaxClients, MaxClientsPerAddress: cfg.SSE.MaxClientsPerAddress,
			MaxLag: cfg.SSE.MaxLag, KeepAlive: time.Duration(cfg.SSE.KeepAlive)},
	})
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	switch {
	case cfg.ReadOnly:
		log.Info("admin API is read-only: every mutation answers 403")
	case cfg.Token == "":
		log.Warn("no admin token configured: mutations are accepted only from this host (loopback peer, loopback or listen Host header, no forwarding header); set token, VIGIL_TOKEN or VIGIL_TOKEN_FILE")
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
// on the real clock, reachable by the worker processes, and by no other
// local user: it requires a random password.
func startEmbeddedRedis() (*miniredis.Miniredis, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", fmt.Errorf("start embedded redis: %w", err)
	}
	password := hex.EncodeToString(b[:])
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	m.RequireAuth(password)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", fmt.Errorf("start embedded redis: %w", err)
	}
	return m, password, nil
}

// writeRedisFile writes url to a file only this user can read, for
// --redis-file; remove deletes it.
func writeRedisFile(url string) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "vigil-embedded-")
	if err != nil {
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	path = filepath.Join(dir, "redis-url")
	if err := os.WriteFile(path, []byte(url+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	return path, func() { os.RemoveAll(dir) }, nil
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
