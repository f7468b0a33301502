package openapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/openapi/client"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

const token = "e2e-token"

// TestGeneratedClientAgainstLiveServer drives a live server, with a real
// supervisor running `vigil worker` and a pool whose command always fails,
// through the client generated from the committed spec.
func TestGeneratedClientAgainstLiveServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	good, bad := "e2e-good-"+env.Prefix[2:10], "e2e-bad-"+env.Prefix[2:10]
	sup, err := supervisor.New(supervisor.Config{
		Host: "e2e", RedisURL: env.URL, Prefix: env.Prefix,
		Pools: []supervisor.Pool{
			{Queue: good, Workers: 1, Command: []string{vigilBin, "worker"}},
			{Queue: bad, Workers: 1, Command: []string{"sh", "-c", "exit 3"}},
		},
		Heartbeat:   supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 3 * time.Second, StartTimeout: 10 * time.Second},
		Policy:      policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxInWindow: 2, Window: time.Minute},
		StopTimeout: 2 * time.Second, Logger: quiet,
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sup.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	h, err := server.New(server.Config{Store: store, Supervisor: sup, Queues: []string{good, bad}, Token: token, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer cleanAsynq(env.Client, good, bad)

	anon, err := client.NewClientWithResponses(srv.URL, client.WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	authed, err := client.NewClientWithResponses(srv.URL, client.WithHTTPClient(srv.Client()),
		client.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	failed := health.ComponentID{Queue: bad, Slot: 0}
	waitStatus(t, ctx, store, env.Client, failed, health.StatusFailed)
	waitStatus(t, ctx, store, env.Client, health.ComponentID{Queue: good, Slot: 0}, health.StatusHealthy)

	// List workers, with and without the token (reads are open).
	for name, c := range map[string]*client.ClientWithResponses{"without token": anon, "with token": authed} {
		list, err := c.ListWorkersWithResponse(ctx)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list workers %s: %v %d %s", name, err, list.StatusCode(), list.Body)
		}
		if n := len(list.JSON200.Workers); n != 2 {
			t.Fatalf("list workers %s: %d workers", name, n)
		}
	}

	// Pause and resume a queue: refused without the token.
	p, err := anon.PauseQueueWithResponse(ctx, good, nil)
	if err != nil || p.StatusCode() != http.StatusUnauthorized || p.ApplicationproblemJSON401 == nil {
		t.Fatalf("pause without token: %v %d %s", err, p.StatusCode(), p.Body)
	}
	p, err = authed.PauseQueueWithResponse(ctx, good, nil)
	if err != nil || p.JSON200 == nil || !p.JSON200.Changed || !p.JSON200.Paused {
		t.Fatalf("pause: %v %d %s", err, p.StatusCode(), p.Body)
	}
	q, err := anon.GetQueueWithResponse(ctx, good)
	if err != nil || q.JSON200 == nil || !q.JSON200.Paused {
		t.Fatalf("queue after pause: %v %s", err, q.Body)
	}
	r, err := authed.ResumeQueueWithResponse(ctx, good)
	if err != nil || r.JSON200 == nil || !r.JSON200.Changed || r.JSON200.Paused {
		t.Fatalf("resume: %v %d %s", err, r.StatusCode(), r.Body)
	}
	qs, err := authed.ListQueuesWithResponse(ctx)
	if err != nil || qs.JSON200 == nil || len(qs.JSON200.Queues) != 2 || qs.JSON200.Queues[0].Paused || qs.JSON200.Queues[1].Paused {
		t.Fatalf("queues after resume: %v %s", err, qs.Body)
	}
	if p, _ := authed.PauseQueueWithResponse(ctx, "nope", nil); p.StatusCode() != http.StatusNotFound || p.ApplicationproblemJSON404 == nil {
		t.Fatalf("pause unknown queue: %d %s", p.StatusCode(), p.Body)
	}

	// Reset the failed worker: refused without the token.
	rs, err := anon.ResetWorkerWithResponse(ctx, failed.String(), nil)
	if err != nil || rs.StatusCode() != http.StatusUnauthorized {
		t.Fatalf("reset without token: %v %d", err, rs.StatusCode())
	}
	rs, err = authed.ResetWorkerWithResponse(ctx, failed.String(), &client.ResetWorkerParams{})
	if err != nil || rs.JSON200 == nil {
		t.Fatalf("reset: %v %d %s", err, rs.StatusCode(), rs.Body)
	}
	w := rs.JSON200.Worker
	if w.Status != "stopped" || !w.Held || w.LifetimeRestarts != 0 || w.RestartCount != 0 {
		t.Fatalf("after reset: %+v", w)
	}
	got, err := authed.GetWorkerWithResponse(ctx, failed.String())
	if err != nil || got.JSON200 == nil || got.JSON200.Status != "stopped" || got.JSON200.FailedAt != nil && *got.JSON200.FailedAt != 0 {
		t.Fatalf("worker after reset: %v %s", err, got.Body)
	}
	// Reset of a running worker: 409 problem.
	rs, _ = authed.ResetWorkerWithResponse(ctx, health.ComponentID{Queue: good, Slot: 0}.String(), nil)
	if rs.StatusCode() != http.StatusConflict || rs.ApplicationproblemJSON409 == nil || rs.ApplicationproblemJSON409.Status == nil {
		t.Fatalf("reset of a running worker: %d %s", rs.StatusCode(), rs.Body)
	}
}

// waitStatus blocks on the event stream until id has status st.
func waitStatus(t *testing.T, ctx context.Context, store *health.Store, rdb *redis.Client, id health.ComponentID, st health.Status) {
	t.Helper()
	last := "0"
	for {
		c, err := store.Get(ctx, id)
		if err == nil && c.Status == st {
			return
		}
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{store.Keys().Events(), last}, Block: 2 * time.Second}).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatalf("%s did not become %s: %v", id, st, err)
		default:
			last = res[0].Messages[len(res[0].Messages)-1].ID
		}
	}
}

// cleanAsynq removes asynq's keys of the test's queues.
func cleanAsynq(rdb *redis.Client, queues ...string) {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range queues {
		var keys []string
		iter := rdb.Scan(c, 0, "asynq:{"+q+"}*", 1000).Iterator()
		for iter.Next(c) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(c, keys...)
		}
		rdb.SRem(c, "asynq:queues", q)
	}
}
