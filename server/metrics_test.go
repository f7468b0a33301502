package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/server"
)

// GET /metrics is a plain handler; with auth_reads it needs the token like
// every read, and without a Metrics it does not exist.
func TestMetricsRoute(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	m, err := metrics.New(metrics.Config{Store: store, Host: "h1", Queues: []string{"tag"}, Version: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(cfg server.Config, auth string) (int, string) {
		t.Helper()
		cfg.Store = store
		h, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	code, body := get(server.Config{Metrics: m}, "")
	if code != http.StatusOK || !strings.Contains(body, `vigil_build_info{asynq=`) || !strings.Contains(body, `version="v1.2.3"`) {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	if code, _ := get(server.Config{Metrics: m, Token: "t", AuthReads: true}, ""); code != http.StatusUnauthorized {
		t.Fatalf("auth_reads without a token: %d", code)
	}
	if code, _ := get(server.Config{Metrics: m, Token: "t", AuthReads: true}, "t"); code != http.StatusOK {
		t.Fatalf("auth_reads with the token: %d", code)
	}
	if code, _ := get(server.Config{}, ""); code != http.StatusNotFound {
		t.Fatalf("no Metrics configured: %d", code)
	}
}
