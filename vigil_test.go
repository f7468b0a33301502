package vigil_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil"
	"github.com/vigil-dev/vigil/internal/testredis"
)

func TestNewRefusesBadConfig(t *testing.T) {
	ok := vigil.DefaultSettings()
	ok.Redis = "redis://127.0.0.1:1/0"
	tests := []struct {
		name string
		cfg  vigil.Config
		want string
	}{
		{"no redis", vigil.Config{Settings: vigil.DefaultSettings()}, "Settings.Redis"},
		{"embedded", vigil.Config{Settings: func() vigil.Settings { s := ok; s.Redis = "embedded"; return s }()}, "Settings.Redis"},
		{"base path", vigil.Config{Settings: ok, BasePath: "admin/"}, "BasePath"},
		{"pool", vigil.Config{Settings: func() vigil.Settings {
			s := ok
			s.Pools = []vigil.Pool{{Queue: "bad queue!", Workers: 1, Command: []string{"true"}}}
			return s
		}()}, "queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := vigil.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// The handler answers 503 before Start and after Close; Close twice is
// fine; a client handed over stays open.
func TestLifecycle(t *testing.T) {
	r := testredis.New(t)
	s := vigil.DefaultSettings()
	s.Redis, s.Prefix, s.Host = r.URL, r.Prefix, "h1"
	v, err := vigil.New(vigil.Config{Settings: s, Client: r.Client, BasePath: "/admin"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/admin", v))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/admin/livez"); code != http.StatusServiceUnavailable {
		t.Errorf("before Start: %d, want 503", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Start(ctx); err == nil {
		t.Error("a second Start did not fail")
	}
	if code, body := get("/admin/livez"); code != http.StatusOK {
		t.Errorf("running: %d %s", code, body)
	}
	if code, body := get("/admin/openapi.json"); code != http.StatusOK || !strings.Contains(body, `"url":"/admin/"`) {
		t.Errorf("spec under /admin: %d %.200s", code, body)
	}
	if code, body := get("/admin/api/v1/hosts"); code != http.StatusOK || !strings.Contains(body, `"h1"`) {
		t.Errorf("hosts: %d %.300s", code, body)
	}
	if v.Supervisor() == nil {
		t.Error("no supervisor while running")
	}
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if code, _ := get("/admin/livez"); code != http.StatusServiceUnavailable {
		t.Errorf("after Close: %d, want 503", code)
	}
	if err := v.Start(ctx); err == nil {
		t.Error("Start after Close did not fail")
	}
	if err := r.Client.Ping(ctx).Err(); err != nil {
		t.Errorf("the program's client was closed: %v", err)
	}
}

// silentRedis is a TCP server that accepts connections and never answers:
// a Redis that hangs. accepted receives each connection it takes.
func silentRedis(t *testing.T) (url string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "redis://" + ln.Addr().String() + "/0", ch
}

// While Start waits on a Redis that does not answer, the handler answers
// at once (503, as before Start: a probe's /livez is not held), and a
// Close ends the Start, which then returns an error.
func TestServeAnswersDuringABlockedStart(t *testing.T) {
	url, accepted := silentRedis(t)
	s := vigil.DefaultSettings()
	s.Redis, s.Host = url, "h1"
	v, err := vigil.New(vigil.Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- v.Start(context.Background()) }()
	select {
	case <-accepted: // Start is in its first Redis call
	case err := <-started:
		t.Fatalf("Start returned %v before Redis answered", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Start never reached Redis")
	}
	for _, path := range []string{"/livez", "/readyz", "/api/v1/health"} {
		answered := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			v.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			answered <- rec.Code
		}()
		select {
		case code := <-answered:
			if code != http.StatusServiceUnavailable {
				t.Errorf("%s during Start: %d, want 503", path, code)
			}
		case <-time.After(50 * time.Millisecond):
			t.Fatalf("%s got no answer within 50 ms while Start waited on Redis", path)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Close(ctx); err != nil {
		t.Errorf("Close during Start: %v", err)
	}
	select {
	case err := <-started:
		if err == nil {
			t.Error("Start succeeded though Close came first")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after Close")
	}
	if err := v.Start(ctx); err == nil {
		t.Error("Start after Close did not fail")
	}
}

// Mount writes the prefix once: BasePath+"/" serves the handler with the
// prefix stripped, BasePath redirects there, and other paths are the
// program's.
func TestMount(t *testing.T) {
	r := testredis.New(t)
	s := vigil.DefaultSettings()
	s.Redis, s.Prefix, s.Host = r.URL, r.Prefix, "h1"
	v, err := vigil.New(vigil.Config{Settings: s, Client: r.Client, BasePath: "/admin"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the program") })
	v.Mount(mux)
	for path, want := range map[string]int{"/admin/livez": 200, "/admin/api/v1/hosts": 200, "/admin": 301, "/": 200, "/livez": 404} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
		}
		if path == "/admin" && rec.Header().Get("Location") != "/admin/" {
			t.Errorf("GET /admin redirects to %q, want /admin/", rec.Header().Get("Location"))
		}
	}
}
