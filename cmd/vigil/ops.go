package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/vigil-dev/vigil/alert"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/supervisor"
)

// alertDrain bounds how long a stopping host tries to deliver the alerts
// still queued.
const alertDrain = 3 * time.Second

// startAlerts starts the webhook of alerts.webhook, if configured. stop
// delivers what is queued (alertDrain at most) and stops it.
func startAlerts(cfg config.Config, log *slog.Logger, m *metrics.Metrics) (a supervisor.Alerter, stop func(), err error) {
	if cfg.Alerts.Webhook == "" {
		return nil, func() {}, nil
	}
	wh, err := alert.New(alert.Config{URL: cfg.Alerts.Webhook, Logger: log, OnResult: m.Alert})
	if err != nil {
		return nil, nil, err
	}
	wh.Start()
	log.Info("alerts: failed workers and lost hosts are POSTed to the webhook")
	return wh, func() {
		ctx, cancel := context.WithTimeout(context.Background(), alertDrain)
		defer cancel()
		_ = wh.Stop(ctx)
	}, nil
}

// newMetrics registers Vigil's metrics on a new registry (served at GET
// /metrics); they report this host's workers.
func newMetrics(cfg config.Config, store *health.Store, queues []string, log *slog.Logger) (*metrics.Metrics, error) {
	host := cfg.Host
	if host == "" {
		host, _ = os.Hostname() // as supervisor.New does
	}
	return metrics.New(metrics.Config{Store: store, Host: host, Queues: queues, Version: version, Logger: log})
}
