// Package vigil embeds Vigil in a Go program with one call: the
// supervisor of the configured pools of worker processes, the periodic
// tasks, the alerts and the admin server (API, dashboard, Swagger UI,
// events, metrics) as an http.Handler to mount on the program's own mux.
//
//	settings, err := vigil.LoadSettings("vigil.yaml") // or vigil.DefaultSettings()
//	v, err := vigil.New(vigil.Config{Settings: settings, BasePath: "/admin"})
//	err = v.Start(ctx)
//	mux.Handle("/admin/", http.StripPrefix("/admin", v))
//	defer v.Close(context.Background())
//
// Settings are the configuration file's (README "Configuration"), with the
// same defaults and checks: `vigil serve` runs on this package.
package vigil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/alert"
	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

// Settings is the whole configuration file (README "Configuration"). Start
// from DefaultSettings, ParseSettings or LoadSettings.
type Settings = config.Config

// The parts of Settings, for composite literals.
type (
	Pool         = config.Pool
	Backpressure = config.Backpressure
	Heartbeat    = config.Heartbeat
	Policy       = config.Policy
	SSE          = config.SSE
	JobView      = config.JobView
	WorkerOutput = config.WorkerOutput
	Alerts       = config.Alerts
	Scheduler    = config.Scheduler
	Schedule     = config.Schedule
	// Duration is a time.Duration written "15s" in YAML.
	Duration = config.Duration
	// Size is a byte count written "256KiB" in YAML.
	Size = config.Size
)

// DefaultSettings returns every default of the configuration file.
func DefaultSettings() Settings { return config.Default() }

// ParseSettings reads a YAML document over the defaults; unknown fields
// are errors. It does not read the environment: see LoadSettings.
func ParseSettings(yaml []byte) (Settings, error) { return config.Parse(yaml) }

// LoadSettings reads the YAML file at path ("" = the defaults), then the
// VIGIL_* environment variables and the secret files (token_file,
// redis_file), and checks the result, as `vigil serve` does.
func LoadSettings(path string) (Settings, error) {
	s, err := config.Load(path)
	if err != nil {
		return s, err
	}
	if err := s.ApplyEnv(os.LookupEnv); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	if err := s.ReadSecretFiles(); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	return s, nil
}

// OpenRedis opens a client for a Redis URL as Vigil reads it: redis://,
// rediss:// (TLS), unix://, redis-sentinel:// and redis-cluster://
// (README "Redis connections").
func OpenRedis(url string) (redis.UniversalClient, error) { return redisconn.Open(url) }

// Config is what New needs: the settings, and what a program hands over
// of its own.
type Config struct {
	Settings
	// Client, if set, is the Redis client Vigil uses (Close leaves it
	// open); nil: one is opened for Settings.Redis. Settings.Redis is
	// required either way: the worker processes get it.
	Client redis.UniversalClient
	// Logger receives Vigil's logs (nil: slog.Default()).
	Logger *slog.Logger
	// Registry receives Vigil's metrics, served at GET /metrics (nil: a
	// registry of Vigil's own). Give the program's own to serve both.
	Registry metrics.Registry
	// Alerter, if set, hears of failed workers and lost hosts (besides
	// Settings.Alerts.Webhook, which it replaces when set).
	Alerter supervisor.Alerter
	// BasePath is the prefix the handler is mounted under with
	// http.StripPrefix, e.g. "/admin" (the spec's servers entry and the
	// session cookie's path point under it); "" = the root.
	BasePath string
	// Address is where this host's admin server is reached, shown to the
	// other hosts (e.g. "10.0.0.5:8080"); informational.
	Address string
	// Version is reported in the host record and vigil_build_info.
	Version string
}

// alertDrain bounds how long Close tries to deliver the alerts queued.
const alertDrain = 3 * time.Second

// Vigil is one host of a Vigil cluster embedded in a program. It is an
// http.Handler: the admin server, answering 503 before Start and after
// Close.
type Vigil struct {
	cfg Config
	log *slog.Logger

	mu          sync.Mutex
	started     bool
	closed      bool
	closeDone   chan struct{} // closed when Close is over
	closeErr    error
	handler     *server.Server
	rdb         redis.UniversalClient
	ownRdb      bool
	sup         *supervisor.Supervisor // kept after Close (Supervisor)
	sched       *schedule.Scheduler
	metrics     *metrics.Metrics
	stopWh      func()
	stopJanitor func()
}

// New checks cfg and returns a Vigil to Start. It opens nothing.
func New(cfg Config) (*Vigil, error) {
	if cfg.Redis == "" || cfg.Redis == config.RedisEmbedded {
		return nil, errors.New("vigil: Settings.Redis: the Redis URL is required (the worker processes connect to it)")
	}
	cfg.PoolDefaults() // pools built in Go get the file's defaults
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vigil: %w", err)
	}
	if cfg.BasePath != "" && (cfg.BasePath[0] != '/' || cfg.BasePath[len(cfg.BasePath)-1] == '/') {
		return nil, fmt.Errorf("vigil: BasePath %q must start with / and not end with one", cfg.BasePath)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	return &Vigil{cfg: cfg, log: cfg.Logger}, nil
}

// Start connects to Redis, checks its key layout, starts the supervisor
// (its workers), the scheduler and the alerts, and makes the handler
// answer. On an error everything it started is stopped again.
func (v *Vigil) Start(ctx context.Context) (err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.closed:
		return errors.New("vigil: Start after Close")
	case v.started:
		return errors.New("vigil: started twice")
	}
	defer func() {
		if err != nil {
			_ = v.take().stop(context.Background())
			v.sup = nil
		}
	}()
	cfg := v.cfg
	v.rdb = cfg.Client
	if v.rdb == nil {
		if v.rdb, err = redisconn.Open(cfg.Redis); err != nil {
			return err
		}
		v.ownRdb = true
	}
	if err := redisconn.Ping(ctx, v.rdb, 2*time.Second); err != nil {
		return err
	}
	store := health.NewStore(v.rdb, cfg.Prefix, 0)
	// A start that fails before the supervisor joins (Redis does not
	// answer) is tried again, and a frozen worker of this host's last
	// process would outlive it meanwhile: kill those (fault explorer E54).
	host := cfg.Host
	if host == "" {
		host, _ = os.Hostname() // as supervisor.New does
	}
	orphans := func(err error) error {
		supervisor.KillFrozenOrphans(host, cfg.Redis, store.Keys().Prefix, v.log)
		return err
	}
	// Before anything is written: a newer key layout is refused.
	if _, err := store.CheckSchema(ctx); err != nil {
		return orphans(err)
	}
	queues := make([]string, len(cfg.Pools))
	timeouts, maxTimeouts, retentions := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}
	maxRetries := map[string]int{}
	for i, p := range cfg.Pools {
		queues[i], timeouts[p.Queue] = p.Queue, time.Duration(p.TaskTimeout)
		maxTimeouts[p.Queue], retentions[p.Queue] = time.Duration(p.MaxTaskTimeout), time.Duration(p.Retention)
		if p.MaxRetry != nil {
			maxRetries[p.Queue] = *p.MaxRetry
		}
	}
	// asynq's paused key is the truth: start-up lifts no pause, it only
	// migrates the flags of earlier releases (docs/design.md §6).
	if err := queue.NewControl(store).Apply(ctx, queues); err != nil {
		return orphans(err)
	}
	if v.metrics, err = metrics.New(metrics.Config{Registry: cfg.Registry, Store: store, Host: host, Queues: queues,
		Version: cfg.Version, Logger: v.log}); err != nil {
		return err
	}
	alerter := cfg.Alerter
	if alerter == nil && cfg.Alerts.Webhook != "" {
		wh, err := alert.New(alert.Config{URL: cfg.Alerts.Webhook, Logger: v.log, OnResult: v.metrics.Alert})
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		wh.Start()
		v.stopWh = func() {
			dctx, cancel := context.WithTimeout(context.Background(), alertDrain)
			defer cancel()
			_ = wh.Stop(dctx)
		}
		alerter = wh
		v.log.Info("alerts: failed workers and lost hosts are POSTed to the webhook")
	}
	// The leader fires the schedules; the supervisor's leader step says
	// who leads (sched is set before the supervisor starts).
	var sched *schedule.Scheduler
	v.sup, err = supervisor.New(supervisor.Config{
		Host:        cfg.Host,
		RedisURL:    cfg.Redis,
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
		Address:     cfg.Address,
		Version:     cfg.Version,
		Stats:       queueStats(store),
		Recoverer:   queue.NewRecoverer(store, queue.RecovererConfig{Logger: v.log}),
		Alerts:      alerter,
		Metrics:     v.metrics,
		Logger:      v.log,
		OnLeader:    func(leading bool, until time.Time) { sched.Leading(leading, until) },
	}, store)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	settings := cfg.SchedulerSettings()
	schedules := schedule.NewStore(store, schedule.StoreConfig{Queues: queues, Settings: settings, TaskTimeouts: timeouts,
		Host: v.sup.Config().Host, Logger: v.log})
	applied, err := schedules.ApplyConfig(ctx, cfg.ScheduleDefinitions())
	if err != nil {
		return orphans(fmt.Errorf("config: %w", err))
	}
	if applied {
		v.log.Info("schedules of this host's configuration applied to the cluster", "schedules", len(cfg.Schedules))
	}
	sched = schedule.New(store, schedule.Config{Settings: settings, TaskTimeouts: timeouts, Host: v.sup.Config().Host,
		Metrics: v.metrics, Logger: v.log,
		// Redis lost its data: the leader writes the configured schedules again.
		Restore: func(ctx context.Context) (bool, error) { return schedules.ApplyConfig(ctx, cfg.ScheduleDefinitions()) }})
	sched.Start()
	v.sched = sched
	// Kept scratch directories of this host's pools, bounded.
	roots, minAge := cfg.ScratchRoots(queue.ScratchRootDefault())
	jctx, stopJanitor := context.WithCancel(context.Background())
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		queue.NewScratchJanitor(queue.JanitorConfig{Roots: roots, MinAge: minAge, MaxAge: time.Duration(cfg.ScratchMaxAge),
			MaxBytes: int64(cfg.ScratchMaxBytes), Logger: v.log, Removed: v.metrics.ScratchRemoved}).Run(jctx)
	}()
	v.stopJanitor = func() { stopJanitor(); <-janitorDone }
	if err := v.sup.Start(ctx); err != nil {
		return err
	}
	proxies, err := cfg.TrustedProxyPrefixes()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	v.handler, err = server.New(server.Config{
		Store: store, Supervisor: v.sup, Queues: queues, TaskTimeouts: timeouts, MaxTaskTimeouts: maxTimeouts,
		Retentions: retentions, MaxRetries: maxRetries,
		Token: cfg.Token, AuthReads: cfg.AuthReads, ReadOnly: cfg.ReadOnly, MaxBody: int64(cfg.MaxBody),
		ListenHosts: cfg.ListenHosts(), TrustedProxies: proxies, CookieSecure: cfg.CookieSecure,
		DurableEnqueue: queue.DurableConfig{Replicas: cfg.DurableEnqueue.Replicas, Timeout: time.Duration(cfg.DurableEnqueue.Timeout)},
		PayloadPreview: int(cfg.JobView.PayloadPreview), MaxPayloadShown: int(cfg.JobView.MaxPayload), ReadBudget: int64(cfg.JobView.ReadBudget),
		BasePath: cfg.BasePath, Version: server.APIVersion, Logger: v.log, Cluster: v.sup, MaxPoolSize: cfg.MaxPoolSize, Metrics: v.metrics,
		Schedules: schedules, SSE: server.SSEConfig{MaxClients: cfg.SSE.MaxClients, MaxClientsPerAddress: cfg.SSE.MaxClientsPerAddress,
			MaxLag: cfg.SSE.MaxLag, KeepAlive: time.Duration(cfg.SSE.KeepAlive)},
	})
	if err != nil {
		return fmt.Errorf("admin server: %w", err)
	}
	switch {
	case cfg.ReadOnly:
		v.log.Info("admin API is read-only: every mutation answers 403")
	case cfg.Token == "":
		v.log.Warn("no admin token configured: mutations are accepted only from this host (loopback peer, loopback or listen Host header, no forwarding header); set token, VIGIL_TOKEN or VIGIL_TOKEN_FILE")
	default:
		v.log.Info("admin API: mutations need the bearer token", "auth_reads", cfg.AuthReads)
	}
	v.started = true
	v.log.Info("vigil running", "version", cfg.Version, "host", v.sup.Config().Host, "redis", redisconn.Describe(cfg.Redis),
		"redis_tls", redisconn.UsesTLS(cfg.Redis), "pools", len(cfg.Pools))
	return nil
}

// ServeHTTP serves the admin server: API, dashboard, Swagger UI at /docs,
// events, metrics. Before Start and after Close it answers 503.
func (v *Vigil) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	h := v.handler
	if v.closed {
		h = nil
	}
	v.mu.Unlock()
	if h == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "vigil is not running", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// CloseEvents ends the event streams (GET /api/v1/events), which never end
// by themselves; the rest of the handler goes on answering. Give it to
// http.Server.RegisterOnShutdown so that Shutdown can return, then call
// Close; Close calls it too.
func (v *Vigil) CloseEvents() {
	v.mu.Lock()
	h := v.handler
	v.mu.Unlock()
	if h != nil {
		_ = h.Close()
	}
}

// Supervisor is the host's supervisor (nil before Start), for what the
// admin API does not cover.
func (v *Vigil) Supervisor() *supervisor.Supervisor {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sup
}

// Close shuts the host down in the right order: the handler answers 503
// and the event streams end (an http.Server's Shutdown can then return),
// the supervisor stops its workers gracefully (stop_timeout, bounded by
// ctx), the scheduler stops, the queued alerts are delivered (3 s at
// most), and the Redis client it opened is closed. Safe to call twice, at
// once, and before Start.
func (v *Vigil) Close(ctx context.Context) error {
	v.mu.Lock()
	if v.closed {
		done := v.closeDone
		v.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return v.closeErr
	}
	v.closed = true
	v.closeDone = make(chan struct{})
	parts := v.take()
	v.mu.Unlock()
	v.closeErr = parts.stop(ctx)
	close(v.closeDone)
	return v.closeErr
}

// running is what Start started, for stop.
type running struct {
	handler *server.Server
	sup     *supervisor.Supervisor
	sched   *schedule.Scheduler
	stopWh  func()
	stopJan func()
	rdb     redis.UniversalClient // closed by stop
}

// take hands over what runs; v.mu is held.
func (v *Vigil) take() running {
	r := running{handler: v.handler, sup: v.sup, sched: v.sched, stopWh: v.stopWh, stopJan: v.stopJanitor}
	if v.ownRdb {
		r.rdb = v.rdb
	}
	v.handler, v.sched, v.stopWh, v.stopJanitor, v.rdb, v.ownRdb = nil, nil, nil, nil, nil, false
	return r
}

func (r running) stop(ctx context.Context) error {
	var errs []error
	if r.handler != nil {
		errs = append(errs, r.handler.Close())
	}
	if r.sup != nil {
		if err := r.sup.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	// After the supervisor's Stop: it says first that it no longer leads.
	if r.sched != nil {
		r.sched.Stop()
	}
	if r.stopWh != nil {
		r.stopWh()
	}
	if r.stopJan != nil {
		r.stopJan()
	}
	if r.rdb != nil {
		errs = append(errs, r.rdb.Close())
	}
	return errors.Join(errs...)
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
