package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/vigil-dev/vigil/alert"
	"github.com/vigil-dev/vigil/internal/config"
	"github.com/vigil-dev/vigil/supervisor"
)

// alertDrain bounds how long a stopping host tries to deliver the alerts
// still queued.
const alertDrain = 3 * time.Second

// startAlerts starts the webhook of alerts.webhook, if configured. stop
// delivers what is queued (alertDrain at most) and stops it.
func startAlerts(cfg config.Config, log *slog.Logger) (a supervisor.Alerter, stop func(), err error) {
	if cfg.Alerts.Webhook == "" {
		return nil, func() {}, nil
	}
	wh, err := alert.New(alert.Config{URL: cfg.Alerts.Webhook, Logger: log})
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
