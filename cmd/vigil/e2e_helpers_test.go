package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil"
	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// envTestWorker makes the test binary run as a demo worker (see TestMain).
const envTestWorker = "VIGIL_E2E_TEST_WORKER"

// e2eTimeout bounds each wait of an end-to-end test: generous, for two
// cores under -race.
const e2eTimeout = 30 * time.Second

// e2e is `vigil serve` running in the test on a Redis of its choosing,
// with pools of demo workers (the test binary itself).
type e2e struct {
	tb    testing.TB
	cfg   config.Config
	sup   *supervisor.Supervisor
	base  string // http://addr
	rdb   redis.UniversalClient
	store *health.Store
	logs  *testlog.Buffer
}

// e2eConfig is a configuration with fast heartbeats, a unique prefix and
// one pool "tag" of n demo workers.
func e2eConfig(tb testing.TB, redisURL string, n int) config.Config {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cfg := config.Default()
	cfg.Redis = cmp.Or(redisURL, config.RedisEmbedded)
	cfg.Listen = "127.0.0.1:0"
	cfg.Prefix = "ve2e" + randSuffix() + ":"
	cfg.Host = "e2e"
	cfg.Lease = config.Duration(3 * time.Second)
	cfg.Heartbeat = config.Heartbeat{Interval: config.Duration(200 * time.Millisecond), TTL: config.Duration(3 * time.Second), StartTimeout: config.Duration(20 * time.Second)}
	cfg.StopTimeout = config.Duration(2 * time.Second)
	cfg.Policy.BackoffBase = config.Duration(50 * time.Millisecond)
	cfg.Pools = []config.Pool{{Queue: "tag", Workers: n, Command: []string{exe}, Concurrency: 1,
		TaskTimeout: config.Duration(time.Minute), Env: map[string]string{envTestWorker: "1"},
		Backpressure: config.Backpressure{PauseInterval: config.Duration(time.Second)}}}
	if err := vigil.ValidateSettings(cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func randSuffix() string {
	return strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "")
}

// startServe runs serve with cfg until the test ends.
func startServe(tb testing.TB, cfg config.Config) *e2e {
	tb.Helper()
	e := &e2e{tb: tb, cfg: cfg, logs: &testlog.Buffer{}}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *supervisor.Supervisor, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, log, func(s *supervisor.Supervisor) { started <- s }) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("serve: %v", err)
			}
		case <-time.After(e2eTimeout):
			tb.Errorf("serve did not stop")
		}
		if tb.Failed() {
			tb.Logf("vigil log:\n%s", e.logs.String())
		}
	})
	select {
	case e.sup = <-started:
	case err := <-done:
		tb.Fatalf("serve: %v\n%s", err, e.logs.String())
	case <-time.After(e2eTimeout):
		tb.Fatalf("serve did not start\n%s", e.logs.String())
	}
	e.base = "http://" + e.sup.Config().Address
	rdb, err := redisconn.Open(e.sup.Config().RedisURL) // the embedded one when cfg.Redis is ""
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	e.rdb, e.store = rdb, health.NewStore(rdb, cfg.Prefix, 0)
	tb.Cleanup(e.deleteKeys)
	return e
}

// deleteKeys removes the test's keys (its prefix, and asynq's keys of its
// queues) one by one: on a cluster they live on several nodes.
func (e *e2e) deleteKeys() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, c redis.UniversalClient, pattern string) {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	}
	patterns := []string{e.cfg.Prefix + "*"}
	for _, p := range e.cfg.Pools {
		patterns = append(patterns, "asynq:{"+p.Queue+"}*")
	}
	for _, pat := range patterns {
		if cc, ok := e.rdb.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
				del(ctx, n, pat)
				return nil
			})
		} else {
			del(ctx, e.rdb, pat)
		}
	}
	e.rdb.SRem(ctx, "asynq:queues", "tag")
}

// waitHealthy waits until every worker of every pool is healthy.
func (e *e2e) waitHealthy() {
	e.tb.Helper()
	var ids []health.ComponentID
	for _, p := range e.cfg.Pools {
		for slot := range p.Workers {
			ids = append(ids, health.ComponentID{Queue: p.Queue, Slot: slot})
		}
	}
	deadline := time.Now().Add(e2eTimeout)
	r := e.events("$")
	for {
		cs, err := e.store.GetMany(context.Background(), ids)
		ok := err == nil
		for _, c := range cs {
			ok = ok && c.Status == health.StatusHealthy
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.tb.Fatalf("workers not healthy: %v %v", err, cs)
		}
		r.next(time.Second) // any change, or a second
	}
}

// streamReader follows the event stream.
type streamReader struct {
	e    *e2e
	last string
}

func (e *e2e) events(from string) *streamReader { return &streamReader{e: e, last: from} }

// next returns the entries after the last one read, waiting up to d.
func (r *streamReader) next(d time.Duration) []health.Event {
	r.e.tb.Helper()
	res, err := r.e.rdb.XRead(context.Background(), &redis.XReadArgs{
		Streams: []string{r.e.store.Keys().Events(), r.last}, Block: d, Count: 1000}).Result()
	if err != nil && err != redis.Nil {
		r.e.tb.Fatalf("read events: %v", err)
	}
	var out []health.Event
	for _, s := range res {
		for _, m := range s.Messages {
			r.last = m.ID
			var ev health.Event
			if data, _ := m.Values["data"].(string); json.Unmarshal([]byte(data), &ev) == nil {
				out = append(out, ev)
			}
		}
	}
	if r.last == "$" {
		r.last = "0" // nothing read yet: "$" would skip what arrives between reads
	}
	return out
}

// waitJob waits until job id of the test's queue reaches state, and returns
// the states it went through.
func (r *streamReader) waitJob(id string, state queue.JobState) []queue.JobState {
	r.e.tb.Helper()
	var seen []queue.JobState
	deadline := time.Now().Add(e2eTimeout)
	for time.Now().Before(deadline) {
		for _, ev := range r.next(time.Second) {
			if ev.Type != health.EventJob || !strings.HasPrefix(ev.Topic, "job:") {
				continue
			}
			je, err := queue.DecodeJobEvent(ev)
			if err != nil || je.ID != id {
				continue
			}
			if je.State != queue.StateProgress {
				seen = append(seen, je.State)
			}
			if je.State == state {
				return seen
			}
		}
	}
	r.e.tb.Fatalf("job %s never reached %s; went through %v", id, state, seen)
	return nil
}

// do sends a request to the admin API and decodes a JSON answer into out
// (if not nil), failing the test unless the status is want.
func (e *e2e) do(method, path string, body any, want int, out any) {
	e.tb.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		e.tb.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.tb.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// enqueue enqueues a demo job on tag and returns its id.
func (e *e2e) enqueue(typ string, ms int) string {
	e.tb.Helper()
	var job struct {
		ID string `json:"id"`
	}
	e.do("POST", "/api/v1/queues/tag/jobs", map[string]any{"type": typ, "payload": map[string]int{"ms": ms}, "max_retry": 3}, http.StatusCreated, &job)
	if job.ID == "" {
		e.tb.Fatal("enqueue: no job id")
	}
	return job.ID
}
