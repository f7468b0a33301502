package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/schedule"
)

// schedules is a host's part in periodic tasks: the store the admin API
// changes them through, and the scheduler that fires them while the host
// leads.
type schedules struct {
	store     *schedule.Store
	scheduler *schedule.Scheduler
}

// startSchedules applies the configured schedules (when they are not the
// set the cluster applied last) and starts the scheduler, idle until the
// supervisor says this host leads.
func startSchedules(ctx context.Context, cfg config.Config, store *health.Store, host string, m *metrics.Metrics, log *slog.Logger) (schedules, error) {
	queues := make([]string, len(cfg.Pools))
	timeouts := map[string]time.Duration{}
	for i, p := range cfg.Pools {
		queues[i], timeouts[p.Queue] = p.Queue, time.Duration(p.TaskTimeout)
	}
	settings := cfg.SchedulerSettings()
	st := schedule.NewStore(store, schedule.StoreConfig{Queues: queues, Settings: settings, TaskTimeouts: timeouts, Host: host, Logger: log})
	applied, err := st.ApplyConfig(ctx, cfg.ScheduleDefinitions())
	if err != nil {
		return schedules{}, fmt.Errorf("config: %w", err)
	}
	if applied {
		log.Info("schedules of this host's configuration applied to the cluster", "schedules", len(cfg.Schedules))
	}
	sc := schedule.New(store, schedule.Config{Settings: settings, TaskTimeouts: timeouts, Host: host, Metrics: m, Logger: log,
		// Redis lost its data: the leader writes the configured schedules again.
		Restore: func(ctx context.Context) (bool, error) { return st.ApplyConfig(ctx, cfg.ScheduleDefinitions()) }})
	sc.Start()
	return schedules{store: st, scheduler: sc}, nil
}
