package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// The event stream's clients and entries are counted.
func TestMetricsOfTheEventStream(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	m, err := metrics.New(metrics.Config{Store: store, Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Config{Store: store, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	resp, err := http.Get(srv.URL + "/api/v1/events?topic=host:*:status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(scrape(), "vigil_sse_clients 1\n") {
		t.Fatalf("one client connected:\n%s", grep(scrape(), "vigil_sse"))
	}
	// Until it has caught up, the client reads the stream on its own and
	// may get the entry below before the broker has read (and counted) it.
	deadline := time.After(10 * time.Second)
	for n, moved := server.Catching(h); n > 0; n, moved = server.Catching(h) {
		select {
		case <-moved:
		case <-deadline:
			t.Fatalf("the client is still catching up")
		}
	}
	if _, err := store.AddEvent(t.Context(), health.Event{Topic: "host:x:status", Type: health.EventHost, Data: []byte(`{"host":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var got string
	for !strings.Contains(got, "host:x:status") {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("read the stream: %v (got %q)", err, got)
		}
		got += string(buf[:n])
	}
	// At least this entry (the health watcher may announce too).
	if out := scrape(); strings.Contains(out, "vigil_sse_events_total 0\n") || !strings.Contains(out, "vigil_sse_events_total ") {
		t.Fatalf("no entry counted:\n%s", grep(out, "vigil_sse"))
	}
	resp.Body.Close()
	h.Close()   // disconnects the client and waits for its handler
	srv.Close() // and the server's
	if out := scrape(); !strings.Contains(out, "vigil_sse_clients 0\n") {
		t.Fatalf("client gone:\n%s", grep(out, "vigil_sse"))
	}
}

func grep(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
