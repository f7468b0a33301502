package vigil_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil"
	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

// LoadSettings reads the file, then the VIGIL_* environment (which wins),
// then the secret files, and checks the result, naming a bad field.
func TestLoadSettings(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "vigil.yaml")
	yaml := "redis: redis://from-file:6379/0\nlisten: 127.0.0.1:9000\ntoken_file: " + token + `
pools:
  - {queue: emails, workers: 3, command: [./bin/email-worker]}
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIGIL_REDIS_URL", "redis://from-env:6379/0")
	s, err := vigil.LoadSettings(file)
	if err != nil {
		t.Fatal(err)
	}
	if s.Redis != "redis://from-env:6379/0" || s.Listen != "127.0.0.1:9000" || s.Token != "s3cret" {
		t.Errorf("redis %q, listen %q, token %q: want the env's redis, the file's listen, the token file's token", s.Redis, s.Listen, s.Token)
	}
	if len(s.Pools) != 1 || s.Pools[0].Workers != 3 || s.Pools[0].Concurrency != config.ConcurrencyDefault ||
		time.Duration(s.Pools[0].TaskTimeout) != config.TaskTimeoutDefault {
		t.Errorf("pools %+v: want one of 3 workers with the defaults filled in", s.Pools)
	}

	if s, err := vigil.LoadSettings(""); err != nil || s.Listen != vigil.DefaultSettings().Listen {
		t.Errorf(`LoadSettings(""): %v, listen %q: want the defaults`, err, s.Listen)
	}
	for name, tt := range map[string]struct{ yaml, env, want string }{
		"unknown field": {yaml: "listne: x\n", want: "listne"},
		"bad env":       {yaml: "", env: "soon", want: "VIGIL_HEARTBEAT_TTL"},
		"bad value":     {yaml: "heartbeat: {interval: 10s, ttl: 5s}\n", want: "heartbeat.ttl"},
		"bad schedule":  {yaml: "pools: [{queue: q, command: [x]}]\nschedules: [{name: n, spec: '61 * * * *', queue: q, type: t}]\n", want: "schedules[0].spec"},
		"no file":       {yaml: "-", want: "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vigil.yaml")
			if tt.yaml != "-" {
				if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.env != "" {
				t.Setenv("VIGIL_HEARTBEAT_TTL", tt.env)
			}
			if _, err := vigil.LoadSettings(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to name %q", err, tt.want)
			}
		})
	}
}

// ParseSettings reads YAML over the defaults and neither reads the
// environment nor judges values; ValidateSettings does.
func TestParseSettings(t *testing.T) {
	t.Setenv("VIGIL_LISTEN", "127.0.0.1:1")
	s, err := vigil.ParseSettings([]byte("heartbeat: {interval: 10s, ttl: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Listen != vigil.DefaultSettings().Listen {
		t.Errorf("listen %q: ParseSettings read the environment", s.Listen)
	}
	if err := vigil.ValidateSettings(s); err == nil || !strings.Contains(err.Error(), "heartbeat.ttl") {
		t.Errorf("ValidateSettings = %v, want it to name heartbeat.ttl", err)
	}
	if _, err := vigil.ParseSettings([]byte("pools: [{queue: q, workers: many}]")); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Errorf("err = %v, want it to name workers", err)
	}
	if err := vigil.ValidateSettings(vigil.DefaultSettings()); err != nil {
		t.Errorf("the defaults are invalid: %v", err)
	}
}

// OpenRedis opens a client Vigil's way for each URL form, and refuses
// what it cannot read with the reason.
func TestOpenRedis(t *testing.T) {
	r := testredis.New(t)
	rdb, err := vigil.OpenRedis(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("ping through the opened client: %v", err)
	}
	for _, bad := range []string{"http://127.0.0.1:6379", "redis://127.0.0.1:6379/banana", "redis-sentinel://127.0.0.1:26379"} {
		if c, err := vigil.OpenRedis(bad); err == nil {
			c.Close()
			t.Errorf("OpenRedis(%q) accepted it", bad)
		}
	}
}

// The configuration package imports none of the packages it configures,
// so it keeps its own copy of their defaults: each must equal the
// package's own.
func TestSettingsDefaultsMatchPackages(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"stop_timeout", config.StopTimeoutDefault, supervisor.StopTimeoutDefault},
		{"concurrency", config.ConcurrencyDefault, supervisor.ConcurrencyDefault},
		{"task_timeout", config.TaskTimeoutDefault, supervisor.TaskTimeoutDefault},
		{"worker_output.tail", config.LogTailDefault, supervisor.LogTailDefault},
		{"worker_output.max_line", config.MaxLogLineDefault, supervisor.MaxLogLineDefault},
		{"durable_enqueue.timeout", config.DurableTimeoutDefault, queue.DurableTimeoutDefault},
		{"scheduler.misfire_grace", config.MisfireGraceDefault, schedule.MisfireGraceDefault},
		{"scheduler.max_catch_up", config.MaxCatchUpDefault, schedule.MaxCatchUpDefault},
		{"sse.max_clients_per_address", config.SSEMaxClientsPerAddressDefault, server.SSEMaxClientsPerAddressDefault},
	} {
		if c.got != c.want {
			t.Errorf("%s: the settings' default %v, its package's %v", c.name, c.got, c.want)
		}
	}
}
