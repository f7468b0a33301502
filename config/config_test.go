package config

import (
	"strings"
	"testing"
	"time"
)

const full = `
redis: redis://127.0.0.1:6379/0
listen: 127.0.0.1:8080
prefix: "vigil:"
host: ""
capacity: 0
lease: 15s
token: ""
auth_reads: false
read_only: false
max_body: 1MiB
sse: {max_clients: 10000, max_lag: 1000, keepalive: 15s}
heartbeat: {interval: 5s, ttl: 30s, start_timeout: 60s}
policy: {backoff_base: 1s, backoff_max: 60s, jitter: 0, window: 5m, max_in_window: 5,
         max_lifetime: 20, stable_after: 5m, job_crash_retries: 2}
stop_timeout: 10s
max_pool_size: 1000
alerts: {webhook: ""}
pools:
  - queue: tag
    workers: 2
    command: ["./bin/tagger"]
    concurrency: 1
    task_timeout: 30m
    env: {MODEL: small}
    backpressure: {high_watermark: 0, load_threshold: 0, pause_interval: 10s}
    keep_scratch_on_success: false
`

func TestParseDesignExample(t *testing.T) {
	c, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxBody != 1<<20 || time.Duration(c.Heartbeat.TTL) != 30*time.Second || c.Pools[0].Env["MODEL"] != "small" ||
		time.Duration(c.Pools[0].TaskTimeout) != 30*time.Minute || c.PolicyConfig().MaxLifetime != 20 {
		t.Fatalf("parsed %+v", c)
	}
}

func TestDefaultsFillOmittedFields(t *testing.T) {
	c, err := Parse([]byte("pools: [{queue: q, workers: 1, command: [x]}]\nheartbeat: {interval: 1s}"))
	if err != nil {
		t.Fatal(err)
	}
	if hb := c.Heartbeat; time.Duration(hb.RecoverMin) != 5*time.Second || time.Duration(hb.RecoverMax) != 2*time.Minute {
		t.Errorf("recovering window bounds %v–%v, want 5s–2m", hb.RecoverMin, hb.RecoverMax)
	}
	if time.Duration(c.Heartbeat.TTL) != 30*time.Second || c.Pools[0].Concurrency != 1 || c.Listen != "127.0.0.1:8080" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", "bogus: 1", "bogus"},
		{"unknown nested field", "heartbeat: {intervall: 1s}", "intervall"},
		{"bad duration", "heartbeat: {ttl: 30}", `heartbeat.ttl: invalid duration "30"`},
		{"bad pool duration", "pools: [{queue: q, command: [x], task_timeout: 1y}]", `pools[0].task_timeout: invalid duration`},
		{"zero ttl", "heartbeat: {ttl: 0s}", "heartbeat.ttl must be > 0"},
		{"ttl not above interval", "heartbeat: {interval: 5s, ttl: 5s}", "heartbeat.ttl (5s) must be greater than heartbeat.interval"},
		{"recover window inverted", "heartbeat: {recover_min: 60s, recover_max: 10s}", "heartbeat.recover_max (10s) must be at least heartbeat.recover_min (1m0s)"},
		{"negative recover_min", "heartbeat: {recover_min: -1s}", "heartbeat.recover_min and recover_max must be >= 0"},
		{"empty command", "pools: [{queue: q, workers: 1, command: []}]", "pools[0].command"},
		{"duplicate queue", "pools: [{queue: q, command: [x]}, {queue: q, command: [y]}]", "pools[1].queue: duplicate"},
		{"bad queue name", "pools: [{queue: 'Q:1', command: [x]}]", "pools[0].queue"},
		{"bad host", "host: 'a{b}'", "host"},
		{"bad size", "max_body: lots", "invalid size"},
		{"jitter", "policy: {jitter: 2}", "policy.jitter"},
		{"too many workers", "pools: [{queue: q, workers: 5000, command: [x]}]", "pools[0].workers"},
		{"bad log format", "log_format: xml", "log_format"},
		{"bad log level", "log_level: loud", "log_level"},
		{"webhook not http", "alerts: {webhook: 'hooks.example/x'}", "alerts.webhook"},
		{"trusted proxy", "trusted_proxies: ['10.0.0.0/8', 'proxy.local']", "trusted_proxies"},
		{"inherit_env pattern", "inherit_env: ['A*B']", "inherit_env"},
		{"line over tail", "worker_output: {tail: 1KiB, max_line: 2KiB}", "worker_output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestEnvThenFlagsWin(t *testing.T) {
	c := Default()
	env := map[string]string{"VIGIL_LISTEN": "127.0.0.1:9000", "VIGIL_HEARTBEAT_TTL": "45s", "VIGIL_READ_ONLY": "true", "VIGIL_POLICY_MAX_IN_WINDOW": "7",
		"VIGIL_INHERIT_ENV": "TMPDIR, LC_*", "VIGIL_WORKER_OUTPUT_TAIL": "64KiB", "VIGIL_TRUSTED_PROXIES": "10.0.0.0/8,192.0.2.1", "VIGIL_COOKIE_SECURE": "true",
		"VIGIL_REDIS_URL": "redis://from-env:6379/0"}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9000" || time.Duration(c.Heartbeat.TTL) != 45*time.Second || !c.ReadOnly || c.Policy.MaxInWindow != 7 ||
		c.InheritEnv.String() != "TMPDIR,LC_*" || c.WorkerOutput.Tail != 64<<10 || !c.CookieSecure || c.Redis != "redis://from-env:6379/0" {
		t.Fatalf("env not applied: %+v", c)
	}
	if p, err := c.TrustedProxyPrefixes(); err != nil || len(p) != 2 || p[1].String() != "192.0.2.1/32" {
		t.Fatalf("trusted proxies %v, %v", p, err)
	}
	if c.ListenHosts()[0] != "127.0.0.1" {
		t.Fatalf("env not applied: %+v", c)
	}
	bad := map[string]string{"VIGIL_HEARTBEAT_TTL": "soon"}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := bad[k]; return v, ok }); err == nil || !strings.Contains(err.Error(), "VIGIL_HEARTBEAT_TTL") {
		t.Fatalf("bad env err = %v", err)
	}
}
