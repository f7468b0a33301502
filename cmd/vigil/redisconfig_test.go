package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestServeRefusesWithoutRedis: `vigil serve` with no Redis named never
// starts on an embedded one by itself (issue 17, item 6): it refuses with
// one line naming the flag, the variable and the config key.
func TestServeRefusesWithoutRedis(t *testing.T) {
	unsetEnv(t, "VIGIL_REDIS_URL", "VIGIL_REDIS")
	var out, errb bytes.Buffer
	code := run([]string{"serve", "--listen", "127.0.0.1:0"}, &out, &errb)
	msg := strings.TrimSpace(errb.String())
	if code == 0 {
		t.Fatal("serve started without a Redis")
	}
	for _, want := range []string{"--redis", "VIGIL_REDIS_URL", "redis:", "redis: embedded"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if strings.Count(msg, "\n") != 0 {
		t.Errorf("want one line, got %q", msg)
	}
}

// TestServeReadsRedisAlias: VIGIL_REDIS (the name serve read before) is an
// alias of VIGIL_REDIS_URL; both set to different values is an error.
func TestServeReadsRedisAlias(t *testing.T) {
	port := testredis.FreePort(t) // nothing listens there: serve stops at its ping
	dead := "redis://127.0.0.1:" + strconv.Itoa(port)
	for _, tt := range []struct {
		name     string
		env      map[string]string
		wantText string
	}{
		{"documented name", map[string]string{"VIGIL_REDIS_URL": dead}, "127.0.0.1:" + strconv.Itoa(port)},
		{"alias", map[string]string{"VIGIL_REDIS": dead}, "127.0.0.1:" + strconv.Itoa(port)},
		{"both, same", map[string]string{"VIGIL_REDIS": dead, "VIGIL_REDIS_URL": dead}, "127.0.0.1:" + strconv.Itoa(port)},
		{"both, different", map[string]string{"VIGIL_REDIS": dead, "VIGIL_REDIS_URL": "redis://127.0.0.1:1"}, "VIGIL_REDIS_URL and its alias VIGIL_REDIS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			unsetEnv(t, "VIGIL_REDIS_URL", "VIGIL_REDIS")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := run([]string{"serve", "--listen", "127.0.0.1:0"}, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), tt.wantText) {
				t.Fatalf("code %d, stderr %q: want it to name %q", code, errb.String(), tt.wantText)
			}
		})
	}
}

// TestStartupLineSaysTLS: the "vigil running" line says whether the Redis
// connection uses TLS, and go-redis's own lines are JSON in a JSON log.
func TestStartupLineSaysTLS(t *testing.T) {
	e := startServe(t, e2eConfig(t, "", 1))
	var found bool
	for line := range strings.SplitSeq(e.logs.String(), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
		if rec["msg"] == "vigil running" {
			found = true
			if tls, ok := rec["redis_tls"].(bool); !ok || tls {
				t.Errorf("start-up line %q: want redis_tls=false", line)
			}
		}
	}
	if !found {
		t.Fatalf("no start-up line in:\n%s", e.logs.String())
	}
}

// unsetEnv unsets the variables for the test (restored after it).
func unsetEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "") // restores the old value after the test
		os.Unsetenv(n)
	}
}
