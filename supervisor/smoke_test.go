package supervisor_test

import (
	"context"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

func TestSmokeKillRestart(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	var logs testlog.Buffer
	sup, err := supervisor.New(supervisor.Config{
		Host: "h1", RedisURL: env.URL, Prefix: env.Prefix,
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 1 * time.Second},
		Policy:    policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond},
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sup.Stop(ctx)
	id := health.ComponentID{Queue: "q", Slot: 0}
	c := waitFor(t, store, id, func(c health.Component) bool { return c.Status == health.StatusHealthy })
	syscall.Kill(c.PID, syscall.SIGKILL)
	c2 := waitFor(t, store, id, func(x health.Component) bool {
		return x.Status == health.StatusHealthy && x.PID != c.PID
	})
	if c2.Restarts.RestartCount != 1 || c2.Restarts.LifetimeRestarts != 1 {
		t.Fatalf("restarts = %+v", c2.Restarts)
	}
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c3, _ := store.Get(ctx, id)
	if c3.Status != health.StatusStopped || c3.Reason != "host shutdown" || c3.ExitCode != 0 {
		t.Fatalf("after stop: %+v\n%s", c3, logs.String())
	}
}
