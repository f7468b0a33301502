package redisconn

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestLoggerLevels(t *testing.T) {
	var buf bytes.Buffer
	l := slogPrintf{slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "m", "127.0.0.1:6432")
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v\n", 5, "refused")
	var lines []map[string]any
	for _, b := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not JSON: %q", b)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	if lines[0]["level"] != "INFO" || lines[0]["lib"] != "go-redis" || lines[0]["msg"] != `sentinel: new master="m" addr="127.0.0.1:6432"` {
		t.Errorf("topology line: %v", lines[0])
	}
	if lines[1]["level"] != "WARN" || lines[1]["msg"] != "redis: connection pool: failed to dial after 5 attempts: refused" {
		t.Errorf("fault line: %v", lines[1])
	}
}
