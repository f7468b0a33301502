package vigil_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
