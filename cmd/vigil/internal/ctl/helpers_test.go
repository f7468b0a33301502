package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/cmd/vigil/internal/ctl"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

const (
	token       = "s3cret-token"
	waitTimeout = 20 * time.Second
)

// live is an admin server (server.New) over a real supervisor of two
// heartbeating workers on the test's Redis.
type live struct {
	t     *testing.T
	url   string
	store *health.Store
	rdb   redis.UniversalClient
}

func newLive(t *testing.T) *live {
	t.Helper()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	// asynq's paused key is the truth (no start-up clears it) and is not
	// under the test's prefix: no pause passes from one test to the next.
	unpause := func() { env.Client.Del(context.Background(), "asynq:{tag}:paused") }
	unpause()
	t.Cleanup(unpause)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sup, err := supervisor.New(supervisor.Config{
		Host: "h1", RedisURL: env.URL, Prefix: env.Prefix, Logger: log,
		Pools:     []supervisor.Pool{{Queue: "tag", Workers: 2, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 2 * time.Second},
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sup.Stop(ctx)
	})
	h, err := server.New(server.Config{Store: store, Supervisor: sup, Cluster: sup, Queues: []string{"tag"},
		Token: token, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		if c, ok := any(h).(io.Closer); ok {
			_ = c.Close()
		}
		srv.Close()
	})
	l := &live{t: t, url: srv.URL, store: store, rdb: env.Client}
	l.waitWorkers(health.StatusHealthy, 0, 1)
	return l
}

// waitWorkers waits until the workers of tag with these slots have status
// st, waking on every event of the stream.
func (l *live) waitWorkers(st health.Status, slots ...int) {
	l.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	last := "0"
	for {
		ok := true
		for _, s := range slots {
			c, err := l.store.Get(context.Background(), health.ComponentID{Queue: "tag", Slot: s})
			ok = ok && err == nil && c.Status == st
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("workers %v never %s", slots, st)
		}
		res, _ := l.rdb.XRead(context.Background(), &redis.XReadArgs{Streams: []string{l.store.Keys().Events(), last}, Block: 200 * time.Millisecond}).Result()
		for _, s := range res {
			if n := len(s.Messages); n > 0 {
				last = s.Messages[n-1].ID
			}
		}
	}
}

// ctl runs `vigil ctl args…` against the server with the token in the
// environment, and returns its exit code, stdout and stderr.
func (l *live) ctl(args ...string) (int, string, string) {
	l.t.Helper()
	return runCtl(l.t, map[string]string{ctl.EnvServer: l.url, ctl.EnvToken: token}, args...)
}

func runCtl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code := ctl.Run(ctx, args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

// must runs ctl and fails the test unless it exits 0 and its stdout has
// every one of want.
func (l *live) must(want []string, args ...string) string {
	l.t.Helper()
	code, out, errs := l.ctl(args...)
	if code != 0 {
		l.t.Fatalf("vigil ctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			l.t.Fatalf("vigil ctl %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
		}
	}
	return out
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
}

// post calls the API directly.
func (l *live) post(path string) {
	l.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, l.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		l.t.Fatalf("POST %s: %s", path, resp.Status)
	}
}
