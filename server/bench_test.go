package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// benchComponents is how many components the benchmarks put in Redis.
const benchComponents = 1000

// seedMany writes n healthy components of q1 (records, restart history and
// index) in one pipeline per 100.
func (h *harness) seedMany(n int) {
	h.tb.Helper()
	for i := range n {
		h.seed(health.ComponentID{Queue: h.q1, Slot: i}, health.StatusHealthy, func(c *health.Component) {
			c.PID = 10000 + i
			c.HealthySince, c.LastHeartbeat = time.UnixMilli(1_790_000_002_000), time.UnixMilli(1_790_000_003_000)
			c.Restarts.LifetimeRestarts = i % 7
		})
	}
}

// latencies records per-operation times and reports ops/s, p50 and p99.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	slices.Sort(l.d)
	if len(l.d) == 0 {
		return
	}
	q := func(p float64) float64 { return float64(l.d[int(float64(len(l.d)-1)*p)].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(l.d))/elapsed.Seconds(), "req/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkListWorkers compares GET /api/v1/workers over HTTP (keep-alive,
// loopback) with the Redis reads alone (Store.List), with 1,000 components.
// Run it on a real Redis: VIGIL_TEST_REDIS_URL=redis://127.0.0.1:6379/0
// go test -run XXX -bench ListWorkers ./server/
func BenchmarkListWorkers(b *testing.B) {
	h := newHarness(b, setup{})
	h.seedMany(benchComponents)
	srv := httptest.NewServer(h.h)
	defer srv.Close()
	client := srv.Client()
	url := srv.URL + "/api/v1/workers"
	get := func(b *testing.B) {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n < benchComponents*100 {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
	list := func(b *testing.B) {
		cs, err := h.store.List(context.Background())
		if err != nil || len(cs) != benchComponents {
			b.Fatalf("List: %d, %v", len(cs), err)
		}
	}
	for _, bm := range []struct {
		name string
		op   func(*testing.B)
	}{{"api", get}, {"store", list}} {
		b.Run(bm.name+"/serial", func(b *testing.B) {
			var l latencies
			start := time.Now()
			for b.Loop() {
				t := time.Now()
				bm.op(b)
				l.add(time.Since(t))
			}
			l.report(b, time.Since(start))
		})
		b.Run(bm.name+"/parallel", func(b *testing.B) {
			var l latencies
			b.SetParallelism(4)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					t := time.Now()
					bm.op(b)
					l.add(time.Since(t))
				}
			})
			l.report(b, time.Since(start))
		})
	}
}
