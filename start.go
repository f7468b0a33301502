package vigil

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/vigil-dev/vigil/alert"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

// poolMaps are the per-queue settings of the pools that several parts
// need, by queue.
type poolMaps struct {
	queues      []string
	timeouts    map[string]time.Duration
	maxTimeouts map[string]time.Duration
	retentions  map[string]time.Duration
	maxRetries  map[string]int
}

func newPoolMaps(pools []Pool) poolMaps {
	m := poolMaps{queues: make([]string, len(pools)), timeouts: map[string]time.Duration{},
		maxTimeouts: map[string]time.Duration{}, retentions: map[string]time.Duration{}, maxRetries: map[string]int{}}
	for i, p := range pools {
		m.queues[i], m.timeouts[p.Queue] = p.Queue, time.Duration(p.TaskTimeout)
		m.maxTimeouts[p.Queue], m.retentions[p.Queue] = time.Duration(p.MaxTaskTimeout), time.Duration(p.Retention)
		if p.MaxRetry != nil {
			m.maxRetries[p.Queue] = *p.MaxRetry
		}
	}
	return m
}

// start starts the parts in dependency order: Redis, its key layout and
// the queues' pause flags, metrics, alerts, the supervisor, the schedules,
// the scratch janitor, the admin server. On an error it returns what it
// started so far, for the caller to stop. No lock is held.
func (v *Vigil) start(ctx context.Context) (p parts, err error) {
	cfg := v.cfg
	rdb := cfg.Client
	if rdb == nil {
		if rdb, err = redisconn.Open(cfg.Redis); err != nil {
			return p, err
		}
		p.rdb = rdb
	}
	if err := redisconn.Ping(ctx, rdb, 2*time.Second); err != nil {
		return p, err
	}
	store := health.NewStore(rdb, cfg.Prefix, 0)
	pools := newPoolMaps(cfg.Pools)
	if err := v.prepareRedis(ctx, store, pools.queues); err != nil {
		return p, err
	}
	m, err := metrics.New(metrics.Config{Registry: cfg.Registry, Store: store, Host: v.hostID(), Queues: pools.queues,
		Version: cfg.Version, Logger: v.log})
	if err != nil {
		return p, err
	}
	alerter := cfg.Alerter
	if alerter == nil && cfg.Alerts.Webhook != "" {
		if alerter, p.stopWh, err = v.startWebhook(m); err != nil {
			return p, err
		}
	}
	// The leader fires the schedules; the supervisor's leader step says
	// who leads (sched is set before the supervisor starts).
	var sched *schedule.Scheduler
	if p.sup, err = v.newSupervisor(store, m, alerter, func(leading bool, until time.Time) { sched.Leading(leading, until) }); err != nil {
		return p, err
	}
	host := p.sup.Config().Host
	schedules := schedule.NewStore(store, schedule.StoreConfig{Queues: pools.queues, Settings: schedulerSettings(cfg.Settings),
		TaskTimeouts: pools.timeouts, Host: host, Logger: v.log})
	if sched, err = v.startScheduler(ctx, store, schedules, pools, host, m); err != nil {
		return p, v.killFrozenOrphans(store, err)
	}
	p.sched = sched
	p.stopJan = v.startJanitor(m)
	if err := p.sup.Start(ctx); err != nil {
		return p, err
	}
	p.handler, err = v.newHandler(store, p.sup, schedules, pools, m)
	return p, err
}

// hostID is this host's id: the configured one, else the hostname, as
// supervisor.New chooses it.
func (v *Vigil) hostID() string {
	if v.cfg.Host != "" {
		return v.cfg.Host
	}
	h, _ := os.Hostname()
	return h
}

// killFrozenOrphans kills this host's frozen workers of an earlier
// process and returns err. A start that fails before the supervisor joins
// the cluster (Redis does not answer) is tried again by whoever runs it,
// and a frozen worker cannot act on its parent-death signal: without this
// it would outlive every failed start (TestKillFrozenOrphans).
func (v *Vigil) killFrozenOrphans(store *health.Store, err error) error {
	supervisor.KillFrozenOrphans(v.hostID(), v.cfg.Redis, store.Keys().Prefix, v.log)
	return err
}

// prepareRedis refuses a newer key layout before anything is written, and
// migrates the pause flags of earlier releases. asynq's paused key is the
// truth: start-up lifts no pause (docs/design.md §6).
func (v *Vigil) prepareRedis(ctx context.Context, store *health.Store, queues []string) error {
	if _, err := store.CheckSchema(ctx); err != nil {
		return v.killFrozenOrphans(store, err)
	}
	if err := queue.NewControl(store).Apply(ctx, queues); err != nil {
		return v.killFrozenOrphans(store, err)
	}
	return nil
}

// startWebhook starts the alerts webhook; stop delivers what is queued
// (alertDrain at most).
func (v *Vigil) startWebhook(m *metrics.Metrics) (supervisor.Alerter, func(), error) {
	wh, err := alert.New(alert.Config{URL: v.cfg.Alerts.Webhook, Logger: v.log, OnResult: m.Alert})
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	wh.Start()
	v.log.Info("alerts: failed workers and lost hosts are POSTed to the webhook")
	return wh, func() {
		dctx, cancel := context.WithTimeout(context.Background(), alertDrain)
		defer cancel()
		_ = wh.Stop(dctx)
	}, nil
}

func (v *Vigil) newSupervisor(store *health.Store, m *metrics.Metrics, alerter supervisor.Alerter, onLeader func(bool, time.Time)) (*supervisor.Supervisor, error) {
	cfg := v.cfg
	sup, err := supervisor.New(supervisor.Config{
		Host:        cfg.Host,
		RedisURL:    cfg.Redis,
		Prefix:      cfg.Prefix,
		Pools:       supervisorPools(cfg.Settings),
		InheritEnv:  cfg.InheritEnv,
		LogTail:     int(cfg.WorkerOutput.Tail),
		MaxLogLine:  int(cfg.WorkerOutput.MaxLine),
		Heartbeat:   heartbeatConfig(cfg.Settings),
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
		Metrics:     m,
		Logger:      v.log,
		OnLeader:    onLeader,
	}, store)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return sup, nil
}

// startScheduler applies this host's configured schedules to the cluster
// and starts the scheduler (it fires only while this host leads).
func (v *Vigil) startScheduler(ctx context.Context, store *health.Store, schedules *schedule.Store, pools poolMaps, host string, m *metrics.Metrics) (*schedule.Scheduler, error) {
	defs := scheduleDefinitions(v.cfg.Settings)
	applied, err := schedules.ApplyConfig(ctx, defs)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if applied {
		v.log.Info("schedules of this host's configuration applied to the cluster", "schedules", len(defs))
	}
	sched := schedule.New(store, schedule.Config{Settings: schedulerSettings(v.cfg.Settings), TaskTimeouts: pools.timeouts, Host: host,
		Metrics: m, Logger: v.log,
		// Redis lost its data: the leader writes the configured schedules again.
		Restore: func(ctx context.Context) (bool, error) { return schedules.ApplyConfig(ctx, defs) }})
	sched.Start()
	return sched, nil
}

// startJanitor starts the removal of this host's pools' kept scratch
// directories past their bounds; the func it returns stops it and waits.
func (v *Vigil) startJanitor(m *metrics.Metrics) func() {
	cfg := v.cfg
	roots, minAge := scratchRoots(cfg.Settings, queue.ScratchRootDefault())
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue.NewScratchJanitor(queue.JanitorConfig{Roots: roots, MinAge: minAge, MaxAge: time.Duration(cfg.ScratchMaxAge),
			MaxBytes: int64(cfg.ScratchMaxBytes), Logger: v.log, Removed: m.ScratchRemoved}).Run(ctx)
	}()
	return func() { stop(); <-done }
}

// newHandler builds the admin server and says at start-up how mutations
// are authorised.
func (v *Vigil) newHandler(store *health.Store, sup *supervisor.Supervisor, schedules *schedule.Store, pools poolMaps, m *metrics.Metrics) (*server.Server, error) {
	cfg := v.cfg
	proxies, err := cfg.TrustedProxyPrefixes()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	h, err := server.New(server.Config{
		Store: store, Supervisor: sup, Queues: pools.queues, TaskTimeouts: pools.timeouts, MaxTaskTimeouts: pools.maxTimeouts,
		Retentions: pools.retentions, MaxRetries: pools.maxRetries,
		Token: cfg.Token, AuthReads: cfg.AuthReads, ReadOnly: cfg.ReadOnly, MaxBody: int64(cfg.MaxBody),
		ListenHosts: cfg.ListenHosts(), TrustedProxies: proxies, CookieSecure: cfg.CookieSecure,
		DurableEnqueue: queue.DurableConfig{Replicas: cfg.DurableEnqueue.Replicas, Timeout: time.Duration(cfg.DurableEnqueue.Timeout)},
		PayloadPreview: int(cfg.JobView.PayloadPreview), MaxPayloadShown: int(cfg.JobView.MaxPayload), ReadBudget: int64(cfg.JobView.ReadBudget),
		BasePath: cfg.BasePath, Version: server.APIVersion, Logger: v.log, Cluster: sup, MaxPoolSize: cfg.MaxPoolSize, Metrics: m,
		Schedules: schedules, SSE: server.SSEConfig{MaxClients: cfg.SSE.MaxClients, MaxClientsPerAddress: cfg.SSE.MaxClientsPerAddress,
			MaxLag: cfg.SSE.MaxLag, KeepAlive: time.Duration(cfg.SSE.KeepAlive)},
	})
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	switch {
	case cfg.ReadOnly:
		v.log.Info("admin API is read-only: every mutation answers 403")
	case cfg.Token == "":
		v.log.Warn("no admin token configured: mutations are accepted only from this host (loopback peer, loopback or listen Host header, no forwarding header); set token, VIGIL_TOKEN or VIGIL_TOKEN_FILE")
	default:
		v.log.Info("admin API: mutations need the bearer token", "auth_reads", cfg.AuthReads)
	}
	return h, nil
}
