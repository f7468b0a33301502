package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

const testToken = "s3cret-token"

// harness is one admin server on a test Redis, maybe with a real
// supervisor running `vigil worker` processes.
type harness struct {
	tb     testing.TB
	redis  *testredis.Env
	store  *health.Store
	sup    *supervisor.Supervisor
	cfg    server.Config
	h      http.Handler
	q1, q2 string // configured queues, unique to the test (asynq's keys are global)
}

// setup describes a harness.
type setup struct {
	workers int // workers of q1 run by a real supervisor (0: no supervisor)
	command []string
	cfg     func(*server.Config)
}

func newHarness(tb testing.TB, s setup) *harness {
	tb.Helper()
	env := testredis.New(tb)
	suffix := randHex(3)
	h := &harness{tb: tb, redis: env, store: health.NewStore(env.Client, env.Prefix, 0), q1: "tag-" + suffix, q2: "lib-" + suffix}
	tb.Cleanup(func() { cleanAsynq(env.Client, h.q1, h.q2) })
	h.cfg = server.Config{
		Store: h.store, Queues: []string{h.q1, h.q2}, Token: testToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// miniredis cannot unblock a stream read: keep Close quick.
		SSE: server.SSEConfig{ReadBlock: 50 * time.Millisecond},
	}
	if s.workers > 0 {
		h.startSupervisor(s)
		h.cfg.Supervisor, h.cfg.Cluster = h.sup, h.sup
	}
	if s.cfg != nil {
		s.cfg(&h.cfg)
	}
	handler, err := server.New(h.cfg)
	if err != nil {
		tb.Fatalf("server.New: %v", err)
	}
	tb.Cleanup(func() { _ = handler.Close() })
	h.h = handler
	h.waitHealthAnnounced()
	return h
}

// waitHealthAnnounced waits for the new server's first health_update (its
// broker announces the health it finds at start), so that tests which
// compare Redis before and after a request do not see it.
func (h *harness) waitHealthAnnounced() {
	h.tb.Helper()
	c := ctx(h.tb)
	last := "0"
	for {
		res, err := h.redis.Client.XRead(c, &redis.XReadArgs{Streams: []string{h.store.Keys().Events(), last}, Block: 2 * time.Second, Count: 100}).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			h.tb.Fatalf("wait for the first health announcement: %v", err)
		default:
			for _, m := range res[0].Messages {
				if m.Values["type"] == health.EventHealth {
					return
				}
				last = m.ID
			}
		}
	}
}

func (h *harness) startSupervisor(s setup) {
	h.tb.Helper()
	cmd := s.command
	if cmd == nil {
		cmd = []string{vigilBin, "worker"}
	}
	sup, err := supervisor.New(supervisor.Config{
		Host: "test-host", RedisURL: h.redis.URL, Prefix: h.redis.Prefix,
		Pools:       []supervisor.Pool{{Queue: h.q1, Workers: s.workers, Command: cmd}},
		Heartbeat:   supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 3 * time.Second, StartTimeout: 10 * time.Second},
		Policy:      policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxInWindow: 2, Window: time.Minute},
		StopTimeout: 2 * time.Second,
		Lease:       1500 * time.Millisecond, // cluster ticks every 0.5 s
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, h.store)
	if err != nil {
		h.tb.Fatalf("supervisor.New: %v", err)
	}
	if err := sup.Start(ctx(h.tb)); err != nil {
		h.tb.Fatalf("supervisor start: %v", err)
	}
	h.tb.Cleanup(func() {
		if err := sup.Stop(context.Background()); err != nil {
			h.tb.Errorf("supervisor stop: %v", err)
		}
	})
	h.sup = sup
}

// with returns h reporting to tb (a fuzz target must not use the F).
func (h *harness) with(tb testing.TB) *harness {
	c := *h
	c.tb = tb
	return &c
}

func (h *harness) id(slot int) health.ComponentID { return health.ComponentID{Queue: h.q1, Slot: slot} }

// req is one request; its client is loopback unless remote says otherwise.
type req struct {
	method, path, body string
	ctype              string
	token              string // "" = no Authorization header
	remote             string
	host               string // Host header; default 127.0.0.1:8080, noHost for none
	header             map[string]string
	cookie             *http.Cookie
}

// noHost as req.host sends no Host header.
const noHost = "(none)"

func (h *harness) do(r req) *httptest.ResponseRecorder {
	h.tb.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, "http://127.0.0.1:8080"+r.path, body)
	switch r.host {
	case "":
	case noHost:
		hr.Host = ""
	default:
		hr.Host = r.host
	}
	hr.RemoteAddr = "127.0.0.1:40000"
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.ctype != "" {
		hr.Header.Set("Content-Type", r.ctype)
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	if r.cookie != nil {
		hr.AddCookie(r.cookie)
	}
	rec := httptest.NewRecorder()
	if strings.HasPrefix(r.path, "/api/v1/events") {
		// An event stream never ends: stop it once its response started.
		c, cancel := context.WithCancel(hr.Context())
		defer cancel()
		h.h.ServeHTTP(flushCancel{rec, cancel}, hr.WithContext(c))
		return rec
	}
	h.h.ServeHTTP(rec, hr)
	return rec
}

// flushCancel ends the request at its first flush.
type flushCancel struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (f flushCancel) Flush() {
	f.ResponseRecorder.Flush()
	f.cancel()
}

// get and post call with the token.
func (h *harness) get(path string) *httptest.ResponseRecorder {
	h.tb.Helper()
	return h.do(req{method: http.MethodGet, path: path, token: testToken})
}

func (h *harness) post(path, body string) *httptest.ResponseRecorder {
	h.tb.Helper()
	return h.do(req{method: http.MethodPost, path: path, body: body, token: testToken})
}

// decode checks the status and decodes the JSON body.
func decode[T any](tb testing.TB, rec *httptest.ResponseRecorder, status int) T {
	tb.Helper()
	var v T
	if rec.Code != status {
		tb.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		tb.Fatalf("decode %T: %v; body %s", v, err, rec.Body)
	}
	return v
}

// problem is an RFC 9457 problem detail.
type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks that rec is a problem detail with status.
func wantProblem(tb testing.TB, rec *httptest.ResponseRecorder, status int) problem {
	tb.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		tb.Errorf("Content-Type %q, want application/problem+json (status %d, body %s)", ct, rec.Code, rec.Body)
	}
	p := decode[problem](tb, rec, status)
	if p.Status != status || p.Title == "" {
		tb.Errorf("problem %+v: want status %d and a title", p, status)
	}
	return p
}

func ctx(tb testing.TB) context.Context {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return c
}

// seed writes a component record directly (no supervisor).
// seedStored seeds id in st and returns its record as the store reads it
// back (with what the store adds: rev, created_at).
func (h *harness) seedStored(id health.ComponentID, st health.Status) health.Component {
	h.tb.Helper()
	h.seed(id, st, nil)
	rec, err := h.store.Get(context.Background(), id)
	if err != nil {
		h.tb.Fatal(err)
	}
	return rec
}

func (h *harness) seed(id health.ComponentID, st health.Status, mod func(*health.Component)) {
	h.tb.Helper()
	c := health.Component{ID: id, Status: st, Host: "box-1", PID: 4242, StartedAt: time.UnixMilli(1_790_000_000_000), UpdatedAt: time.UnixMilli(1_790_000_001_000)}
	if mod != nil {
		mod(&c)
	}
	if _, err := h.store.Write(ctx(h.tb), c, health.Write{NoCheck: true, NoEvent: true, Index: true, Restarts: true}); err != nil {
		h.tb.Fatalf("seed %s: %v", id, err)
	}
}

// waitStatus blocks on the event stream until id's record has status st
// (and held, when held is set).
func (h *harness) waitStatus(id health.ComponentID, st health.Status, held bool) health.Component {
	h.tb.Helper()
	c := ctx(h.tb)
	last := "0"
	for {
		got, err := h.store.Get(c, id)
		if err == nil && got.Status == st && got.Held == held {
			return got
		}
		if err != nil && !errors.Is(err, health.ErrNotFound) {
			h.tb.Fatalf("read %s: %v", id, err)
		}
		res, err := h.redis.Client.XRead(c, &redis.XReadArgs{Streams: []string{h.store.Keys().Events(), last}, Block: 2 * time.Second, Count: 100}).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			h.tb.Fatalf("%s did not reach %s (held %v): last %+v; %v", id, st, held, got, err)
		default:
			msgs := res[0].Messages
			last = msgs[len(msgs)-1].ID
		}
	}
}

// dump reads every key of the test: the store's prefix and asynq's keys of
// the test's queues.
func (h *harness) dump() map[string]string {
	h.tb.Helper()
	c := ctx(h.tb)
	rdb := h.redis.Client
	var keys []string
	for _, pat := range []string{h.redis.Prefix + "*", "asynq:{" + h.q1 + "}*", "asynq:{" + h.q2 + "}*"} {
		iter := rdb.Scan(c, 0, pat, 1000).Iterator()
		for iter.Next(c) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			h.tb.Fatalf("SCAN: %v", err)
		}
	}
	out := map[string]string{}
	keys = slices.DeleteFunc(keys, h.volatile)
	for _, k := range keys {
		typ := rdb.Type(c, k).Val()
		var v any
		switch typ {
		case "string":
			v = rdb.Get(c, k).Val()
		case "hash":
			m := rdb.HGetAll(c, k).Val()
			delete(m, health.FieldLastHeartbeat) // the live worker's own beat
			v = m
		case "set":
			m := rdb.SMembers(c, k).Val()
			slices.Sort(m)
			v = m
		case "zset":
			v = rdb.ZRangeWithScores(c, k, 0, -1).Val()
		case "list":
			v = rdb.LRange(c, k, 0, -1).Val()
		case "stream":
			v = slices.DeleteFunc(rdb.XRange(c, k, "-", "+").Val(), func(m redis.XMessage) bool {
				return m.Values["type"] != health.EventAction
			})
		}
		out[k] = typ + " " + fmt.Sprint(v)
	}
	for _, q := range []string{h.q1, h.q2} {
		out["asynq:queues has "+q] = fmt.Sprint(rdb.SIsMember(c, "asynq:queues", q).Val())
	}
	return out
}

// volatile reports the keys that live hosts and workers rewrite on their
// own (heartbeats, host records, leases, worker statistics): no request
// changes them, and dump leaves them out. Of the event stream it keeps the
// operator actions only, which requests write.
func (h *harness) volatile(k string) bool {
	rest, ok := strings.CutPrefix(k, h.redis.Prefix)
	if !ok {
		return false
	}
	for _, p := range []string{"hb:", "host:", "hosts", "slot:", "leader", "wstats:", "cmd:"} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	return false
}

func diff(before, after map[string]string) []string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "deleted "+k)
		} else if w != v {
			d = append(d, fmt.Sprintf("changed %s: %s → %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	slices.Sort(d)
	return d
}

// cleanAsynq removes asynq's keys of the test's queues (on a real Redis
// they outlive the test otherwise).
func cleanAsynq(rdb *redis.Client, queues ...string) {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range queues {
		iter := rdb.Scan(c, 0, "asynq:{"+q+"}*", 1000).Iterator()
		var keys []string
		for iter.Next(c) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(c, keys...)
		}
		rdb.SRem(c, "asynq:queues", q)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type httpRec = httptest.ResponseRecorder

// waitNextEvent blocks until a new entry reaches the event stream.
func (h *harness) waitNextEvent() {
	h.tb.Helper()
	c := ctx(h.tb)
	if _, err := h.redis.Client.XRead(c, &redis.XReadArgs{Streams: []string{h.store.Keys().Events(), "$"}, Block: 5 * time.Second, Count: 1}).Result(); err != nil && !errors.Is(err, redis.Nil) {
		h.tb.Fatalf("wait for an event: %v", err)
	}
}
