package queue_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
)

// The worker reports VIGIL_VERSION in its heartbeat: the record holds it.
func TestWorkerReportsItsVersion(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Version = "v9.9.9-test"
	e.runWorker(cfg, map[string]asynq.Handler{"x": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })})
	c := waitComponent(t, e, health.ComponentID{Queue: e.q}, func(c health.Component) bool { return c.Version != "" })
	if c.Version != "v9.9.9-test" || c.CreatedAt.IsZero() {
		t.Errorf("version %q created_at %v", c.Version, c.CreatedAt)
	}
}
