package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/r3labs/sse/v2"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

// BenchmarkKillToSSECrashed measures, on a real Redis, a worker's SIGKILL
// → the crashed worker_update read by an SSE client of the admin server
// (supervisor reaps it, writes the record and the event; the broker's
// blocking read wakes and fans it out). One iteration is one kill.
//
// In the same run a reader of the stream itself (a blocking XREAD on a
// client of its own, as the broker's) notes when the crashed entry
// reached it, so each kill's latency splits into the supervisor's part
// (stream-p50-ms, stream-p99-ms: kill → the entry readable) and the
// admin server's (gap-p50-ms, gap-p99-ms: the entry readable → the SSE
// client's read of it), which BENCHMARKS.md's P1 needs to say which side
// a miss is on. The reader only compares bytes, so that it takes as
// little CPU as it can from the path it measures.
//
//	VIGIL_TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test ./server -run '^$' -bench '^BenchmarkKillToSSECrashed$' -benchtime 100x
func BenchmarkKillToSSECrashed(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	q := "bench-" + randHex(3)
	b.Cleanup(func() { cleanAsynq(env.Client, q) })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sup, err := supervisor.New(supervisor.Config{
		Host: "bench-host", RedisURL: env.URL, Prefix: env.Prefix,
		Pools:     []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{vigilBin, "worker"}}},
		Heartbeat: supervisor.Heartbeat{Interval: 50 * time.Millisecond, TTL: 3 * time.Second, StartTimeout: 10 * time.Second},
		// Restart at once, and never give up.
		Policy:      policy.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxInWindow: 1 << 30, MaxLifetime: 1 << 30, Window: time.Minute},
		StopTimeout: 2 * time.Second, Lease: 3 * time.Second, Logger: quiet,
	}, store)
	if err != nil {
		b.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sup.Stop(context.Background()) })
	srv, err := server.New(server.Config{Store: store, Queues: []string{q}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	c := subscribe(b, serveHTTP(b, srv), []string{"worker:" + q + ":*:status"}, "")
	inStream := readCrashed(b, env.URL, store.Keys().Events())
	var lat, stream, gap []time.Duration
	b.ResetTimer()
	for range b.N {
		var pid int
		for pid == 0 {
			if e := c.next().event(b); e.Worker != nil && e.Worker.Status == string(health.StatusHealthy) {
				pid = e.Worker.PID
			}
		}
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		for {
			if e := c.next().event(b); e.Worker != nil && e.Worker.Status == string(health.StatusCrashed) {
				at := time.Now()
				lat = append(lat, at.Sub(start))
				select {
				case s := <-inStream:
					stream = append(stream, s.Sub(start))
					gap = append(gap, at.Sub(s))
				case <-time.After(10 * time.Second):
					b.Fatal("the stream's reader saw no crashed entry within 10 s of the client's")
				}
				break
			}
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
	reportPart(b, "stream", stream)
	reportPart(b, "gap", gap)
}

// readCrashed reads the event stream key on a client of its own from now
// on, and sends the time each crashed worker_update entry was read, until
// the benchmark ends.
func readCrashed(b *testing.B, url, key string) <-chan time.Time {
	b.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan time.Time, 64)
	done := make(chan struct{})
	b.Cleanup(func() {
		cancel()
		<-done
		_ = rdb.Close()
	})
	last, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil {
		b.Fatal(err)
	}
	pos := "0-0"
	if len(last) > 0 {
		pos = last[0].ID
	}
	crashed := []byte(`"status":"` + string(health.StatusCrashed) + `"`)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, pos}, Block: time.Second, Count: 100}).Result()
			at := time.Now()
			if err != nil {
				continue // redis.Nil (the block ran out), or the end
			}
			for _, st := range res {
				for _, m := range st.Messages {
					pos = m.ID
					typ, _ := m.Values[health.EntryType].(string)
					data, _ := m.Values[health.EntryData].(string)
					if typ == health.EventWorker && strings.Contains(data, string(crashed)) {
						select {
						case out <- at:
						default: // the benchmark is not reading: it failed
						}
					}
				}
			}
		}
	}()
	return out
}

// BenchmarkEventFanout measures the delivery latency of one event to 1,000
// and to 10,000 SSE clients that run in another process (bench/sseclients),
// through Vigil's broker (XADD → the broker's blocking XREAD → pattern
// match → one r3labs/sse stream per client) and, in the same run, through a
// bare r3labs/sse broadcast (one stream shared by every client, the event
// published in process). An iteration is one event, sent once every client
// has the previous one. Metrics: latency from send to each client's read
// (p50, p99, max over every delivery), the p99 of each event's slowest
// delivery, and the server process's memory per connected client.
//
//	VIGIL_TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test ./server -run '^$' -bench '^BenchmarkEventFanout$' -benchtime 100x -timeout 30m
//
// -short runs 100 clients only.
func BenchmarkEventFanout(b *testing.B) {
	bin := sseClientsBin(b)
	counts := []int{1000, 10000}
	if testing.Short() {
		counts = []int{100}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("vigil/clients=%d", n), func(b *testing.B) { fanoutVigil(b, bin, n) })
		b.Run(fmt.Sprintf("raw-r3labs/clients=%d", n), func(b *testing.B) { fanoutRaw(b, bin, n) })
	}
}

var (
	sseClientsOnce sync.Once
	sseClientsPath string
	sseClientsErr  error
)

// sseClientsBin builds bench/sseclients next to the test's vigil binary.
func sseClientsBin(b *testing.B) string {
	b.Helper()
	sseClientsOnce.Do(func() {
		sseClientsPath = filepath.Join(filepath.Dir(vigilBin), "sseclients")
		out, err := exec.Command("go", "build", "-o", sseClientsPath, "../bench/sseclients").CombinedOutput()
		if err != nil {
			sseClientsErr = fmt.Errorf("build bench/sseclients: %v\n%s", err, out)
		}
	})
	if sseClientsErr != nil {
		b.Fatal(sseClientsErr)
	}
	return sseClientsPath
}

func fanoutVigil(b *testing.B, bin string, n int) {
	env := testredis.New(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	srv, err := server.New(server.Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		SSE: server.SSEConfig{MaxClients: 2 * n, MaxClientsPerAddress: 2 * n, ReadBlock: 50 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	base := listen(b, srv, srv.Close, nil)
	// Patterns as a dashboard sends them; every client matches the event.
	url := base + "/api/v1/events?topic=system:health&topic=host:*:status&topic=queue:*:status&topic=worker:*:status"
	ctx := context.Background()
	swarm(b, bin, url, n, func(stamp string) {
		if _, err := store.AddEvent(ctx, health.Event{Topic: "worker:bench:0:status", Type: health.EventAction, Timestamp: time.Now().UnixMilli(),
			Action: &health.ActionView{Action: "bench", Target: "worker:bench:0", Result: stamp}}); err != nil {
			b.Fatal(err)
		}
	})
}

func fanoutRaw(b *testing.B, bin string, n int) {
	s := sse.New()
	s.AutoReplay = false
	s.CreateStream("bench")
	// r3labs/sse's Close with clients still connected leaks their
	// goroutines: close it only once the HTTP server has waited for every
	// handler (the clients are gone by then).
	base := listen(b, s, nil, s.Close)
	swarm(b, bin, base+"/?stream=bench", n, func(stamp string) {
		s.Publish("bench", &sse.Event{Data: []byte(`{"topic":"worker:bench:0:status","type":"action","stamp":"` + stamp + `"}`)})
	})
}

// listen serves h on a loopback port. At the end it calls before, shuts
// the HTTP server down (waiting for every handler), and calls after.
func listen(b *testing.B, h http.Handler, before func() error, after func()) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	b.Cleanup(func() {
		if before != nil {
			_ = before()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			b.Errorf("shutdown: %v", err)
			_ = hs.Close()
		}
		<-done
		if after != nil {
			after()
		}
	})
	return "http://" + ln.Addr().String()
}

// fanoutResult is bench/sseclients' report.
type fanoutResult struct {
	Clients, Events, Deliveries, Missing int
	P50                                  int64 `json:"p50_us"`
	P90                                  int64 `json:"p90_us"`
	P99                                  int64 `json:"p99_us"`
	Max                                  int64 `json:"max_us"`
	LastP50                              int64 `json:"last_p50_us"`
	LastP99                              int64 `json:"last_p99_us"`
}

// swarm connects n clients in another process, then sends b.N events, one
// at a time, and reports the latencies and the memory per client.
func swarm(b *testing.B, bin, url string, n int, send func(stamp string)) {
	b.Helper()
	before, beforeStack := memInUse()
	beforeG := runtime.NumGoroutine()
	cmd := exec.Command(bin, "-url", url, "-n", fmt.Sprint(n), "-events", fmt.Sprint(b.N))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	expect := func(want string) string {
		b.Helper()
		if !lines.Scan() {
			b.Fatalf("sseclients ended before %q: %v", want, lines.Err())
		}
		if got := lines.Text(); !strings.HasPrefix(got, want) {
			b.Fatalf("sseclients said %q, want %q", got, want)
		}
		return lines.Text()
	}
	expect("ready")
	after, afterStack := memInUse()
	goroutines := float64(runtime.NumGoroutine()-beforeG) / float64(n)
	perClient := float64(after-before) / float64(n)
	b.Logf("per client: %.0f B of heap, %.0f B of goroutine stacks, %.2f goroutines", float64(after-afterStack-(before-beforeStack))/float64(n), float64(afterStack-beforeStack)/float64(n), goroutines)
	b.ResetTimer()
	for i := range b.N {
		send(fmt.Sprintf("@%d:%d@", i, time.Now().UnixNano()))
		expect(fmt.Sprint("got ", i))
	}
	b.StopTimer()
	var r fanoutResult
	if err := json.Unmarshal([]byte(expect("{")), &r); err != nil {
		b.Fatal(err)
	}
	if r.Missing > 0 {
		b.Errorf("%d deliveries missing", r.Missing)
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(ms(r.P50), "p50-ms")
	b.ReportMetric(ms(r.P99), "p99-ms")
	b.ReportMetric(ms(r.Max), "max-ms")
	b.ReportMetric(ms(r.LastP99), "last-p99-ms")
	b.ReportMetric(perClient, "B/client")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d clients, %d events: deliveries p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; every client had it (p50/p99) %.2f/%.2f ms; %.0f B per client",
		n, b.N, ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max), ms(r.LastP50), ms(r.LastP99), perClient)
}

// memInUse is the heap and the goroutine stacks in use, and the stacks
// alone, after a few GCs (each may halve a goroutine's stack that uses
// little of it, as a long-lived connection's would be).
func memInUse() (total, stacks uint64) {
	for range 4 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, m.StackInuse
}

// reportPart reports the p50 and p99 of d as <name>-p50-ms and
// <name>-p99-ms.
func reportPart(b *testing.B, name string, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	pct := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, name+"-p99-ms")
	b.Logf("%s: n=%d p50=%s p99=%s max=%s", name, len(d), pct(0.5), pct(0.99), d[len(d)-1])
}

func reportLatency(b *testing.B, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	pct := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("n=%d p50=%s p99=%s max=%s", len(d), pct(0.5), pct(0.99), d[len(d)-1])
}
