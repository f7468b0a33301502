package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testredis"
)

func TestServeRejectsBadConfigWithOneLine(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown field", "listenn: x\n", "listenn"},
		{"zero ttl", "heartbeat: {ttl: 0s}\n", "heartbeat.ttl"},
		{"empty command", "pools: [{queue: q, workers: 1, command: []}]\n", "pools[0].command"},
		{"bad queue", "pools: [{queue: 'a:b', workers: 1, command: [x]}]\n", "pools[0].queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vigil.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run([]string{"serve", "--config", path}, &out, &errb)
			msg := strings.TrimSpace(errb.String())
			if code == 0 || !strings.Contains(msg, tt.want) || strings.Count(msg, "\n") != 0 {
				t.Fatalf("code %d, stderr %q: want one line naming %q", code, msg, tt.want)
			}
		})
	}
}

func TestServeFailsFastOnDeadRedis(t *testing.T) {
	port := testredis.FreePort(t) // nothing listens there
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"serve", "--redis", "redis://127.0.0.1:" + strconv.Itoa(port)}, &out, &errb)
	if code == 0 {
		t.Fatal("serve started without Redis")
	}
	if !strings.Contains(errb.String(), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("error does not name the address: %q", errb.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s to fail", d)
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "vigil ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"bogus"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
}
