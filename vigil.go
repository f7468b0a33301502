// Package vigil embeds Vigil in a Go program with one call: the
// supervisor of the configured pools of worker processes, the periodic
// tasks, the alerts and the admin server (API, dashboard, Swagger UI,
// events, metrics) as an http.Handler to mount on the program's own mux.
// Example (the package's example) is the whole embedding:
//
//	settings, err := vigil.LoadSettings("vigil.yaml") // or vigil.DefaultSettings()
//	v, err := vigil.New(vigil.Config{Settings: settings, BasePath: "/admin"})
//	err = v.Start(ctx)
//	defer v.Close(context.Background())
//	v.Mount(mux) // serves /admin/
//
// Settings are the configuration file's (docs/configuration.md), with the
// same defaults and checks: `vigil serve` runs on this package.
package vigil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

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
	// BasePath is the prefix the handler is served under, e.g. "/admin"
	// (Mount serves it there; the spec's servers entry and the session
	// cookie's path point under it); "" = the root.
	BasePath string
	// Address is where this host's admin server is reached, shown to the
	// other hosts (e.g. "10.0.0.5:8080"); informational.
	Address string
	// Version is reported in the host record and vigil_build_info.
	Version string
}

// alertDrain bounds how long Close tries to deliver the alerts queued.
const alertDrain = 3 * time.Second

// lifecycle is where a Vigil is between New and Close.
type lifecycle int

const (
	stateNew      lifecycle = iota // not started, or its last Start failed
	stateStarting                  // Start is connecting to Redis and starting the parts
	stateRunning                   // started: the handler serves
	stateClosed                    // Close was called: for good
)

// Vigil is one host of a Vigil cluster embedded in a program. It is an
// http.Handler: the admin server, answering 503 before Start returns and
// after Close.
//
// mu guards the lifecycle fields only and is never held across a Redis
// call or a part's start or stop, so that the handler answers (503) at
// once while Start waits on Redis (TestServeAnswersDuringABlockedStart).
type Vigil struct {
	cfg Config
	log *slog.Logger

	mu          sync.Mutex
	state       lifecycle
	cancelStart context.CancelFunc // ends the Start under way
	startDone   chan struct{}      // closed when the Start under way returned
	closeDone   chan struct{}      // closed when Close is over
	closeErr    error
	parts       parts                  // what Start started, while running
	sup         *supervisor.Supervisor // parts.sup, kept after Close for Supervisor
}

// New checks cfg and returns a Vigil to Start. It opens nothing.
func New(cfg Config) (*Vigil, error) {
	if cfg.Redis == "" || cfg.Redis == config.RedisEmbedded {
		return nil, errors.New("vigil: Settings.Redis: the Redis URL is required (the worker processes connect to it)")
	}
	cfg.PoolDefaults() // pools built in Go get the file's defaults
	if err := ValidateSettings(cfg.Settings); err != nil {
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
// answer. On an error everything it started is stopped again, and Start
// may be called again. A Close during Start ends it: Start then returns an
// error and Close waits for what it started to stop.
func (v *Vigil) Start(ctx context.Context) error {
	v.mu.Lock()
	switch v.state {
	case stateClosed:
		v.mu.Unlock()
		return errors.New("vigil: Start after Close")
	case stateStarting, stateRunning:
		v.mu.Unlock()
		return errors.New("vigil: started twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	v.state, v.cancelStart, v.startDone = stateStarting, cancel, done
	v.mu.Unlock()
	defer close(done)
	defer cancel()

	p, err := v.start(ctx)
	v.mu.Lock()
	if err == nil && v.state == stateStarting {
		v.state, v.parts, v.sup = stateRunning, p, p.sup
		v.mu.Unlock()
		v.log.Info("vigil running", "version", v.cfg.Version, "host", p.sup.Config().Host, "redis", redisconn.Describe(v.cfg.Redis),
			"redis_tls", redisconn.UsesTLS(v.cfg.Redis), "pools", len(v.cfg.Pools))
		return nil
	}
	closed := v.state == stateClosed
	v.mu.Unlock()
	_ = p.stop(context.Background())
	if closed {
		if err == nil {
			err = errors.New("vigil: closed during Start")
		}
		return err
	}
	v.mu.Lock()
	if v.state == stateStarting {
		v.state = stateNew
	}
	v.mu.Unlock()
	return err
}

// Mount serves the handler on mux under Config.BasePath ("" = the root):
// the pattern BasePath+"/" with the prefix stripped, and BasePath itself
// redirected there, so that the prefix is written once.
func (v *Vigil) Mount(mux *http.ServeMux) {
	base := v.cfg.BasePath
	if base == "" {
		mux.Handle("/", v)
		return
	}
	mux.Handle(base+"/", http.StripPrefix(base, v))
	mux.Handle(base, http.RedirectHandler(base+"/", http.StatusMovedPermanently))
}

// ServeHTTP serves the admin server: API, dashboard, Swagger UI at /docs,
// events, metrics. Before Start and after Close it answers 503.
func (v *Vigil) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	var h http.Handler
	if v.state == stateRunning {
		h = v.parts.handler
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
	h := v.parts.handler
	v.mu.Unlock()
	if h != nil {
		_ = h.Close()
	}
}

// Supervisor is the host's supervisor (nil before Start; kept after
// Close), for what the admin API does not cover.
func (v *Vigil) Supervisor() *supervisor.Supervisor {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sup
}

// Close shuts the host down in the right order: the handler answers 503
// and the event streams end (an http.Server's Shutdown can then return),
// the supervisor stops its workers gracefully (stop_timeout, bounded by
// ctx), the scheduler stops, the queued alerts are delivered (3 s at
// most), and the Redis client it opened is closed. A Start under way is
// ended and waited for. Safe to call twice, at once, and before Start.
func (v *Vigil) Close(ctx context.Context) error {
	v.mu.Lock()
	if v.state == stateClosed {
		done := v.closeDone
		v.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return v.closeErr
	}
	wasStarting := v.state == stateStarting
	v.state = stateClosed
	v.closeDone = make(chan struct{})
	startDone := v.startDone
	if wasStarting {
		v.cancelStart()
	}
	p := v.parts
	v.parts = parts{}
	v.mu.Unlock()
	defer close(v.closeDone)
	if wasStarting { // Start stops what it started
		select {
		case <-startDone:
		case <-ctx.Done():
			v.closeErr = ctx.Err()
			return v.closeErr
		}
	}
	v.closeErr = p.stop(ctx)
	return v.closeErr
}

// parts is what Start started, for stop.
type parts struct {
	handler *server.Server
	sup     *supervisor.Supervisor
	sched   *schedule.Scheduler
	stopWh  func()
	stopJan func()
	rdb     redis.UniversalClient // opened by Start, closed by stop
}

// stop stops the parts in dependency order; any of them may be missing.
func (p parts) stop(ctx context.Context) error {
	var errs []error
	if p.handler != nil {
		errs = append(errs, p.handler.Close())
	}
	if p.sup != nil {
		if err := p.sup.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	// After the supervisor's Stop: it says first that it no longer leads.
	if p.sched != nil {
		p.sched.Stop()
	}
	if p.stopWh != nil {
		p.stopWh()
	}
	if p.stopJan != nil {
		p.stopJan()
	}
	if p.rdb != nil {
		errs = append(errs, p.rdb.Close())
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
