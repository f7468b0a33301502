package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// These benchmarks measure latencies, not throughput: each reports
// percentiles as custom metrics. They need a real Redis
// (VIGIL_TEST_REDIS_URL) and are run by `make bench`.

// BenchmarkKillToCrashed measures SIGKILL of a healthy child → its
// `crashed` worker_update in the event stream, observed by a blocking XREAD
// (no busy loop competing for the CPU). The record is written just before
// its event, so this bounds the time to the record from above.
func BenchmarkKillToCrashed(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	startBenchSupervisor(b, env, 1, time.Second, 10*time.Second)
	id := health.ComponentID{Queue: "q", Slot: 0}
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		c := waitFor(b, store, id, isStatus(health.StatusHealthy))
		r := newEventReader(b, store)
		start := time.Now()
		if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		r.waitEvent(id, func(v health.WorkerView) bool { return v.Status == string(health.StatusCrashed) })
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkKillToReap is BenchmarkKillToCrashed's floor on this machine:
// SIGKILL of the same child (the test worker beating, as the supervisor
// starts it) → its parent's Wait returns, with no supervisor and no Redis
// write between. What BenchmarkKillToCrashed adds to it is Vigil's.
func BenchmarkKillToReap(b *testing.B) {
	env := testredis.NewReal(b)
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		cmd := exec.Command(testWorker, "beat")
		// A slot of its own each time: the last one's heartbeat key is
		// still there, and a worker that finds another pid's refuses to
		// start (health.ErrStale).
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Env = append(os.Environ(), health.EnvRedisURL+"="+env.URL, health.EnvPrefix+"="+env.Prefix,
			health.EnvComponent+"=worker:reap:"+strconv.Itoa(i%health.MaxSlot), health.EnvHeartbeatInterval+"=1s", health.EnvHeartbeatTTL+"=10s")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Up and beating, as a healthy worker is when the supervisor's
		// benchmark kills it.
		line, err := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "ready") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("test worker did not start: %q, %v; stderr: %s", line, err, stderr.Bytes())
		}
		b.StartTimer()
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait() // "signal: killed"
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkHangDetection measures how long after its heartbeat key should
// expire a hung (SIGSTOPped) worker is recorded crashed, at TTL 2s with
// 1,000 other live heartbeat keys refreshed meanwhile.
func BenchmarkHangDetection(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	const ttl = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // 1,000 other live heartbeat keys
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			pipe := env.Client.Pipeline()
			for i := range 1000 {
				pipe.Set(ctx, store.Keys().Heartbeat(health.ComponentID{Queue: "other", Slot: i}), time.Now().UnixMilli(), ttl)
			}
			_, _ = pipe.Exec(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	const workers = 5
	startBenchSupervisor(b, env, workers, 500*time.Millisecond, ttl)
	var over []time.Duration
	b.ResetTimer()
	for range b.N {
		type hung struct {
			c    health.Component
			last time.Time // its last heartbeat
		}
		var stopped []hung
		for s := range workers {
			id := health.ComponentID{Queue: "q", Slot: s}
			c := waitFor(b, store, id, func(c health.Component) bool { return c.Status == health.StatusHealthy })
			if err := syscall.Kill(c.PID, syscall.SIGSTOP); err != nil {
				b.Fatal(err)
			}
			// Once stopped, the key holds its last beat.
			v, err := env.Client.Get(ctx, store.Keys().Heartbeat(c.ID)).Result()
			ms, _ := strconv.ParseInt(v, 10, 64)
			if err != nil || ms == 0 {
				b.Fatalf("%s: no heartbeat value: %v", id, err)
			}
			stopped = append(stopped, hung{c, time.UnixMilli(ms)})
		}
		for _, h := range stopped {
			key := store.Keys().Component(h.c.ID)
			for {
				rec, _ := env.Client.HMGet(ctx, key, health.FieldStatus, health.FieldPID).Result()
				if len(rec) == 2 && (rec[0] != string(health.StatusHealthy) || rec[1] != strconv.Itoa(h.c.PID)) {
					break
				}
				if time.Since(h.last) > 10*ttl {
					b.Fatalf("%s: hang not detected", h.c.ID)
				}
			}
			over = append(over, time.Since(h.last)-ttl)
		}
	}
	b.StopTimer()
	reportPercentiles(b, over)
}

func startBenchSupervisor(b *testing.B, env *testredis.Env, n int, interval, ttl time.Duration) *supervisor.Supervisor {
	b.Helper()
	store := health.NewStore(env.Client, env.Prefix, 0)
	sup, err := supervisor.New(supervisor.Config{
		Host: "bench", RedisURL: env.URL, Prefix: env.Prefix,
		Pools:     []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: interval, TTL: ttl},
		Policy: policy.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
			MaxInWindow: 1 << 30, MaxLifetime: 1 << 30},
		Logger: benchLogger(),
	}, store)
	if err != nil {
		b.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sup.Stop(context.Background()) })
	return sup
}

func reportPercentiles(b *testing.B, d []time.Duration) {
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

func benchLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// BenchmarkFailover measures host SIGKILL → every slot it held healthy on
// the other hosts, at a 2 s and at the default 15 s lease. Each iteration
// starts host c in a process of its own beside hosts a and b.
func BenchmarkFailover(b *testing.B) {
	leases := []time.Duration{2 * time.Second, supervisor.LeaseDefault}
	if testing.Short() {
		leases = leases[:1]
	}
	for _, lease := range leases {
		b.Run("lease="+lease.String(), func(b *testing.B) {
			env := testredis.NewReal(b)
			store := health.NewStore(env.Client, env.Prefix, 0)
			mk := func(host string) *harness {
				h := newHarnessOn(b, env.Client, env.URL, env.Prefix, supervisor.Config{
					Host: host, Lease: lease,
					Pools: []supervisor.Pool{{Queue: "q", Workers: 6, Command: []string{testWorker, "beat"}}},
				})
				h.start()
				return h
			}
			hs := []*harness{mk("a"), mk("b")}
			var lat []time.Duration
			for range b.N {
				cmd := exec.Command(testSupervisor, "-redis", env.URL, "-prefix", env.Prefix, "-worker", testWorker,
					"-workers", "6", "-host", "c", "-lease", lease.String(), "-cluster")
				var cLog bytes.Buffer
				cmd.Stderr = &cLog
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "started" {
					b.Fatalf("host c: %q", line)
				}
				p := waitSpreadWithin(b, store, 6, []string{"a", "b", "c"}, 2, 4*lease)
				var moved []health.ComponentID
				for slot, h := range p {
					if h == "c" {
						moved = append(moved, health.ComponentID{Queue: "q", Slot: slot})
					}
				}
				marks, scansBefore := []int{hs[0].logs.mark(), hs[1].logs.mark()}, scans(hs)
				start := time.Now()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				for _, id := range moved {
					waitForWithin(b, store, id, func(c health.Component) bool {
						return c.Status == health.StatusHealthy && c.Host != "c"
					}, 4*lease)
				}
				took := time.Since(start)
				lat = append(lat, took)
				if took > lease*3/2 {
					// An unexplained outlier (BENCHMARKS.md, a run of 4.00 s
					// at a 2 s lease): what each host did meanwhile, in a
					// file (a benchmark's log is cut to a few lines).
					report := fmt.Sprintf("failover took %s (lease %s), slots %v, scans of a and b %v → %v\n\nhost c's log:\n%s",
						took, lease, moved, scansBefore, scans(hs), cLog.String())
					for i, h := range hs {
						report += fmt.Sprintf("\nhost %s's log since the kill:\n%s", []string{"a", "b"}[i], h.logs.since(marks[i]))
					}
					if f, err := os.CreateTemp("", "vigil-failover-outlier-*.log"); err == nil {
						_, _ = f.WriteString(report)
						_ = f.Close()
						b.Logf("failover took %s (lease %s): the hosts' logs are in %s", took, lease, f.Name())
					}
				}
			}
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkSupervise1000 (P4) runs 1,000 heartbeating workers (1 s
// interval, the default 30 s TTL) under a supervisor in a process of its own
// and measures, over a 20 s window once all are healthy: the supervisor's
// CPU (% of one core), its resident memory, and Redis commands per
// heartbeat. Each heartbeat is one EVALSHA round trip by its worker; the
// supervisor adds one pipelined deadline check per worker per TTL.
func BenchmarkSupervise1000(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	n, window := 1000, 20*time.Second
	if testing.Short() {
		n, window = 100, 3*time.Second
	}
	cmd := exec.Command(testSupervisor, "-redis", env.URL, "-prefix", env.Prefix, "-worker", testWorker,
		"-workers", strconv.Itoa(n), "-host", "p4", "-interval", "1s", "-ttl", "30s", "-cluster")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "started" {
		b.Fatalf("supervisor: %q", line)
	}
	for _, id := range ids("q", n) {
		waitForWithin(b, store, id, isStatus(health.StatusHealthy), time.Minute)
	}
	stats := func() map[string]int64 { return commandStats(b, env.Client) }
	cpu := func() time.Duration {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	b.ResetTimer()
	for range b.N {
		s0, c0, t0 := stats(), cpu(), time.Now()
		<-time.After(window) // the measurement window itself
		s1, c1, el := stats(), cpu(), time.Since(t0)
		var total int64
		for k, v := range s1 {
			if k != "info" {
				total += v - s0[k]
			}
		}
		beats := s1["evalsha"] - s0["evalsha"] + s1["eval"] - s0["eval"]
		status, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
		var rss string
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
		var names []string
		for k := range s1 {
			if s1[k]-s0[k] > 0 {
				names = append(names, k)
			}
		}
		slices.SortFunc(names, func(x, y string) int { return int((s1[y] - s0[y]) - (s1[x] - s0[x])) })
		var top []string
		for _, k := range names[:min(8, len(names))] {
			top = append(top, fmt.Sprintf("%s=%d", k, s1[k]-s0[k]))
		}
		b.Logf("commands in the window (script-internal calls included): %s", strings.Join(top, " "))
		cpuPct := 100 * float64(c1-c0) / float64(el)
		b.ReportMetric(cpuPct, "cpu-%")
		b.ReportMetric(float64(total)/float64(max(beats, 1)), "cmds/beat")
		b.ReportMetric(float64(beats)/el.Seconds(), "beats/s")
		b.ReportMetric(0, "ns/op")
		b.Logf("%d workers, %s window: supervisor CPU %.2f%% of one core, RSS %s; %d heartbeats (%.0f/s), %d Redis commands in all (%.2f per heartbeat)",
			n, el.Round(time.Millisecond), cpuPct, rss, beats, float64(beats)/el.Seconds(), total, float64(total)/float64(max(beats, 1)))
	}
}

// BenchmarkRestartLatency measures a crash (SIGKILL) → the replacement
// process announced healthy (its first heartbeat's worker_update), with
// (almost) no backoff: the policy's backoff is 1µs.
func BenchmarkRestartLatency(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	sup, err := supervisor.New(supervisor.Config{
		Host: "bench", RedisURL: env.URL, Prefix: env.Prefix,
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Heartbeat: supervisor.Heartbeat{Interval: time.Second, TTL: 10 * time.Second},
		Policy: policy.Config{BackoffBase: time.Microsecond, BackoffMax: time.Microsecond,
			MaxInWindow: 1 << 30, MaxLifetime: 1 << 30},
		Logger: benchLogger(),
	}, store)
	if err != nil {
		b.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sup.Stop(context.Background()) })
	id := health.ComponentID{Queue: "q", Slot: 0}
	var lat []time.Duration
	c := waitFor(b, store, id, isStatus(health.StatusHealthy))
	b.ResetTimer()
	for range b.N {
		r := newEventReader(b, store)
		start := time.Now()
		if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		old := c.PID
		r.waitEvent(id, func(v health.WorkerView) bool { return v.Status == string(health.StatusHealthy) && v.PID != old })
		lat = append(lat, time.Since(start))
		c = waitFor(b, store, id, isStatus(health.StatusHealthy))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// commandStats reads Redis's count of calls per command (INFO
// commandstats; commands run inside scripts are counted too).
func commandStats(tb testing.TB, rdb redis.UniversalClient) map[string]int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
	}
	return out
}
