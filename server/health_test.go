package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/server"
)

func TestLivezReadyz(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true }})
	// Open even with auth_reads.
	if rec := h.do(req{method: http.MethodGet, path: "/livez"}); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"ok"`) {
		t.Errorf("livez: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(req{method: http.MethodGet, path: "/readyz"}); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"ready"`) {
		t.Errorf("readyz: %d %s", rec.Code, rec.Body)
	}
}

// deadHandler is a server whose Redis does not answer.
func deadHandler(t *testing.T) http.Handler {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t)), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	h, err := server.New(server.Config{Store: health.NewStore(rdb, "", 0), Queues: []string{"tag"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestReadyzAndHealthWithoutRedis(t *testing.T) {
	h := deadHandler(t)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("readyz without Redis: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/health", nil))
	r := decode[server.HealthReport](t, rec, http.StatusOK)
	if r.Status != server.StatusError || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "redis") {
		t.Errorf("health without Redis = %+v", r)
	}
}

func TestHealth(t *testing.T) {
	h := newHarness(t, setup{})
	r := decode[server.HealthReport](t, h.get("/api/v1/health"), http.StatusOK)
	if r.Status != server.StatusHealthy || len(r.Reasons) != 0 || r.Components != 0 || r.RedisRTTMS <= 0 || r.CheckedAt == 0 {
		t.Fatalf("empty cluster = %+v", r)
	}

	h.seed(h.id(0), health.StatusHealthy, nil)
	h.seed(h.id(1), health.StatusHealthy, nil)
	r = decode[server.HealthReport](t, h.get("/api/v1/health"), http.StatusOK)
	if r.Status != server.StatusHealthy || r.Counts["healthy"] != 2 || r.Counts["failed"] != 0 || r.Components != 2 {
		t.Fatalf("healthy cluster = %+v", r)
	}

	h.seed(h.id(2), health.StatusFailed, nil)
	h.seed(h.id(3), health.StatusCrashed, nil)
	h.seed(health.ComponentID{Queue: h.q2, Slot: 0}, health.StatusStopped, func(c *health.Component) { c.Held = true })
	r = decode[server.HealthReport](t, h.get("/api/v1/health"), http.StatusOK)
	if r.Status != server.StatusDegraded || r.Counts["failed"] != 1 || r.Counts["crashed"] != 1 || r.Counts["stopped"] != 1 || r.Components != 5 {
		t.Fatalf("degraded cluster = %+v", r)
	}
	all := strings.Join(r.Reasons, "\n")
	for _, want := range []string{"1 worker failed", h.id(2).String(), "crashed", "queue " + h.q2 + " has no healthy worker"} {
		if !strings.Contains(all, want) {
			t.Errorf("reasons %q do not mention %q", r.Reasons, want)
		}
	}
}

// TestErrorsNameNoInternalAddress: with Redis unreachable, /readyz, the
// health report and the 5xx answers of the API say what failed without
// Redis's address (issue 18, row 12: "dial tcp 10.0.0.5:6379: connect:
// connection refused" reached any client); the server log has it.
func TestErrorsNameNoInternalAddress(t *testing.T) {
	port := strconv.Itoa(testredis.FreePort(t))
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &testlog.Buffer{}
	h, err := server.New(server.Config{Store: health.NewStore(rdb, "", 0), Queues: []string{"tag"}, Token: testToken,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	for _, path := range []string{"/readyz", "/api/v1/health", "/api/v1/workers", "/api/v1/queues", "/api/v1/queues/tag",
		"/api/v1/queues/tag/jobs", "/api/v1/jobs/tag/abc", "/api/v1/hosts", "/api/v1/pools"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Authorization", "Bearer "+testToken)
		h.ServeHTTP(rec, r)
		if rec.Code < 500 && path != "/api/v1/health" {
			t.Errorf("GET %s without Redis: %d", path, rec.Code)
		}
		if b := rec.Body.String(); strings.Contains(b, ":"+port) || strings.Contains(b, "dial tcp") {
			t.Errorf("GET %s names Redis's address: %s", path, b)
		}
	}
	if !strings.Contains(logs.String(), ":"+port) {
		t.Error("the server log does not say where Redis was")
	}
}
