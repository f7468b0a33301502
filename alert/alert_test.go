package alert

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testlog"
)

// receiver is a local webhook: it answers each request with the next
// status of its script (then 200), and hands every request to the test.
type receiver struct {
	srv  *httptest.Server
	reqs chan request
	mu   sync.Mutex
	plan []int
	hang chan struct{} // non-nil: never answer until closed or cancelled
}

type request struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, plan ...int) *receiver {
	r := &receiver{reqs: make(chan request, 100), plan: plan}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.reqs <- request{header: req.Header.Clone(), body: b}
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
			}
			return
		}
		r.mu.Lock()
		code := http.StatusOK
		if len(r.plan) > 0 {
			code, r.plan = r.plan[0], r.plan[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(func() {
		if r.hang != nil {
			close(r.hang)
		}
		r.srv.Close()
	})
	return r
}

func (r *receiver) next(t *testing.T) request {
	t.Helper()
	select {
	case q := <-r.reqs:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the webhook")
		return request{}
	}
}

func newWebhook(t *testing.T, cfg Config) (*Webhook, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Backoff = max(cfg.Backoff, time.Millisecond)
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, logs
}

func TestSendsTheEventAsJSON(t *testing.T) {
	r := newReceiver(t)
	w, _ := newWebhook(t, Config{URL: r.srv.URL + "/hook"})
	ev := map[string]any{"topic": "worker:tag:0:status", "type": "worker_update", "worker": map[string]any{"status": "failed"}}
	if !w.Notify("worker_failed", ev) {
		t.Fatal("Notify refused")
	}
	q := r.next(t)
	if ct := q.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if k := q.header.Get("X-Vigil-Alert"); k != "worker_failed" {
		t.Errorf("X-Vigil-Alert %q", k)
	}
	var got map[string]any
	if err := json.Unmarshal(q.body, &got); err != nil || got["topic"] != "worker:tag:0:status" {
		t.Fatalf("body %s: %v", q.body, err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sent, failed, dropped, attempts := w.Stats(); sent != 1 || failed != 0 || dropped != 0 || attempts != 1 {
		t.Fatalf("stats sent %d failed %d dropped %d attempts %d", sent, failed, dropped, attempts)
	}
}

func TestRetriesServerErrorsNotClientErrors(t *testing.T) {
	t.Run("5xx then 429 then ok", func(t *testing.T) {
		r := newReceiver(t, 500, 429)
		w, _ := newWebhook(t, Config{URL: r.srv.URL, Retries: 3})
		w.Notify("host_lost", map[string]string{"host": "b"})
		for range 3 {
			r.next(t)
		}
		_ = w.Stop(context.Background())
		if sent, failed, _, attempts := w.Stats(); sent != 1 || failed != 0 || attempts != 3 {
			t.Fatalf("sent %d failed %d attempts %d, want 1, 0, 3", sent, failed, attempts)
		}
	})
	t.Run("gives up after the retries", func(t *testing.T) {
		r := newReceiver(t, 503, 503, 503)
		var mu sync.Mutex
		var results []string
		w, logs := newWebhook(t, Config{URL: r.srv.URL, Retries: 2, OnResult: func(res string) {
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}})
		w.Notify("host_lost", map[string]string{"host": "b"})
		_ = w.Stop(context.Background())
		mu.Lock()
		if len(results) != 1 || results[0] != "failed" {
			t.Errorf("OnResult told %v, want [failed]", results)
		}
		mu.Unlock()
		if sent, failed, _, attempts := w.Stats(); sent != 0 || failed != 1 || attempts != 3 {
			t.Fatalf("sent %d failed %d attempts %d, want 0, 1, 3", sent, failed, attempts)
		}
		if !strings.Contains(logs.String(), "alert not delivered") {
			t.Fatalf("log: %s", logs)
		}
	})
	t.Run("4xx is not retried", func(t *testing.T) {
		r := newReceiver(t, 404)
		w, _ := newWebhook(t, Config{URL: r.srv.URL, Retries: 3})
		w.Notify("host_lost", map[string]string{"host": "b"})
		_ = w.Stop(context.Background())
		if _, failed, _, attempts := w.Stats(); failed != 1 || attempts != 1 {
			t.Fatalf("failed %d attempts %d, want 1, 1", failed, attempts)
		}
	})
}

// A webhook that never answers costs each attempt its timeout and never
// blocks Notify: past the queue's size, alerts are dropped with a log line.
// Stop gives up when its context ends.
func TestHangingReceiverNeverBlocks(t *testing.T) {
	r := newReceiver(t)
	r.hang = make(chan struct{})
	w, logs := newWebhook(t, Config{URL: r.srv.URL, Timeout: 100 * time.Millisecond, Retries: 1, QueueSize: 4})
	start := time.Now()
	w.Notify("worker_failed", map[string]int{"n": 0})
	r.next(t) // the sender is stuck in the first attempt
	accepted := 0
	for i := 1; i <= 20; i++ {
		if w.Notify("worker_failed", map[string]int{"n": i}) {
			accepted++
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Notify blocked: %s for 21 calls", d)
	}
	if accepted < 4 || accepted > 5 {
		t.Fatalf("accepted %d of 20 with a queue of 4", accepted)
	}
	if !strings.Contains(logs.String(), "alert dropped") {
		t.Fatalf("no drop logged: %s", logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stopStart := time.Now()
	if err := w.Stop(ctx); err == nil {
		t.Fatal("Stop delivered everything to a receiver that never answers")
	}
	if d := time.Since(stopStart); d > 2*time.Second {
		t.Fatalf("Stop took %s", d)
	}
	_, failed, dropped, _ := w.Stats()
	if dropped < 15 || failed < 1 {
		t.Fatalf("failed %d dropped %d", failed, dropped)
	}
	if w.Notify("worker_failed", nil) {
		t.Fatal("Notify accepted after Stop")
	}
}

func TestConfigAndLifecycle(t *testing.T) {
	for _, bad := range []string{"", "ftp://x", "localhost:9000", "http://"} {
		if _, err := New(Config{URL: bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	w, err := New(Config{URL: "http://127.0.0.1:1/hook"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil { // before Start
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil { // twice
		t.Fatal(err)
	}
	w.Start() // after Stop: nothing runs
	if w.Notify("x", 1) {
		t.Fatal("Notify accepted by a stopped webhook")
	}
	if got := redact("https://u:p@hooks.example/x?token=secret"); strings.Contains(got, "secret") || strings.Contains(got, ":p@") {
		t.Fatalf("redact = %s", got)
	}
}
