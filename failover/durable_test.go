package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testtopo"
	"github.com/vigil-dev/vigil/queue"
)

// Ports of the durable-enqueue test and benchmark (a master, its replica,
// a sentinel), apart from the scenarios'.
var durablePorts = testtopo.SentinelPorts{Master: port(6434), Replica: port(6435), Sentinel: port(6436)}

// TestDurableEnqueue: with durable_enqueue the API answers 201 only once
// the job is on a replica; with the replica gone it answers 503 with
// Retry-After naming the job, and a retry with that task id answers 409
// (the job was kept on the master).
func TestDurableEnqueue(t *testing.T) {
	gateOnly(t, "durable")
	s := testtopo.StartSentinel(t, durablePorts, testtopo.SentinelConfig{DownAfter: time.Minute})
	path := t.TempDir() + "/d.yaml"
	cfg := map[string]any{"redis": s.URL, "listen": "127.0.0.1:0", "host": "d", "token": testToken,
		"durable_enqueue": map[string]any{"replicas": 1, "timeout": "300ms"}, "log_format": "json",
		"pools": []map[string]any{{"queue": queueName, "workers": 0, "command": []string{"true"}}}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHostFile(t, "d", path)
	enqueue := func(id string) (int, http.Header, string) {
		t.Helper()
		body := map[string]any{"type": "sleep", "payload": 1}
		if id != "" {
			body["task_id"] = id
		}
		code, hdr, resp, err := h.doHeader(http.MethodPost, "/api/v1/queues/"+queueName+"/jobs", body)
		if err != nil {
			t.Fatal(err)
		}
		return code, hdr, string(resp)
	}
	if code, _, resp := enqueue(""); code != http.StatusCreated {
		t.Fatalf("with the replica up: %d %s, want 201", code, resp)
	}
	s.Replica.Kill()
	start := time.Now()
	code, hdr, resp := enqueue("durable-1")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(resp, "durable-1") {
		t.Fatalf("with the replica gone: %d Retry-After=%q %s; want 503 with Retry-After naming the job", code, hdr.Get("Retry-After"), resp)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("503 after %s, want after the 300ms timeout", d)
	}
	if code, _, resp := enqueue("durable-1"); code != http.StatusConflict {
		t.Fatalf("retry with the same task id: %d %s, want 409 (kept on the master)", code, resp)
	}
}

// BenchmarkDurableEnqueue measures an enqueue (queue.Client, in process,
// on a master with one replica) without and with durable_enqueue
// (replicas: 1): ns/op, p50 and p99 per enqueue, jobs/s (one goroutine).
func BenchmarkDurableEnqueue(b *testing.B) {
	if os.Getenv(envGate) == "" {
		b.Skipf("starts real Redis processes: set %s=1 (make test-failover)", envGate)
	}
	s := testtopo.StartSentinel(b, durablePorts, testtopo.SentinelConfig{DownAfter: time.Minute})
	rdb, err := redisconn.Open(s.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	store := health.NewStore(rdb, "vbench:", 0)
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			c := queue.NewClient(store, queue.ClientConfig{Queues: []string{queueName},
				Durable: queue.DurableConfig{Replicas: replicas, Timeout: time.Second}})
			lat := make([]time.Duration, 0, b.N)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				t0 := time.Now()
				if _, err := c.Enqueue(ctx, queueName, asynq.NewTask("sleep", []byte("1"))); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			el := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N)/el.Seconds(), "jobs/s")
		})
	}
}

// gateOnly skips t unless the failover suite runs and envOnly, if set,
// names word.
func gateOnly(t *testing.T, word string) {
	t.Helper()
	if os.Getenv(envGate) == "" {
		t.Skipf("starts real Redis processes: set %s=1 (make test-failover)", envGate)
	}
	if only := os.Getenv(envOnly); only != "" && !matchesAny(word, only) {
		t.Skipf("%s=%s does not name %q", envOnly, only, word)
	}
}
