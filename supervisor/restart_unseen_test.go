package supervisor_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// heldClock is the wall clock, which the test can hold: while held, the
// monitor goroutine blocks at its next look at the time, as on a machine
// too loaded to run it (its timers, real time, still fire and wait for
// it). Not at a look that ends a timed Redis call (availability.answered,
// stepCalls): held there, the call would count as a slow answer, a stall
// seen, which is not what the test makes. Other goroutines go on.
type heldClock struct {
	clock.Real
	mu      sync.Mutex
	gate    chan struct{} // closed to let go; nil while not held
	monitor chan struct{} // closed once the monitor waits on the gate
}

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	gate, monitor := c.gate, c.monitor
	c.mu.Unlock()
	if gate != nil && c.isMonitor() {
		c.mu.Lock()
		select {
		case <-monitor:
		default:
			close(monitor)
		}
		c.mu.Unlock()
		<-gate
	}
	return time.Now()
}

// isMonitor reports whether the caller is the monitor goroutine, outside
// the timing of a Redis call.
func (c *heldClock) isMonitor() bool {
	buf := make([]byte, 64<<10)
	stack := buf[:runtime.Stack(buf, false)]
	return bytes.Contains(stack, []byte("supervisor.(*Supervisor).monitor(")) &&
		!bytes.Contains(stack, []byte("supervisor.(*Supervisor).answered")) &&
		!bytes.Contains(stack, []byte("supervisor.(*stepCalls)"))
}

// hold stops the monitor; it returns once the monitor waits.
func (c *heldClock) hold(tb testing.TB) {
	tb.Helper()
	c.mu.Lock()
	c.gate, c.monitor = make(chan struct{}), make(chan struct{})
	monitor := c.monitor
	c.mu.Unlock()
	tb.Cleanup(c.release) // a test that fails while holding it still stops
	select {
	case <-monitor:
	case <-time.After(waitTimeout):
		tb.Fatal("the monitor did not look at the clock")
	}
}

// release lets the monitor go on (again: nothing).
func (c *heldClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

// unseenRestart runs one beat worker, holds the monitor, freezes the
// worker (its beats held back: it lives, and beats again if let go),
// restarts Redis keeping its data, away for longer than the key's TTL (an
// input: time passing, not a goroutine waited for), and lets the monitor
// go. load, if not nil, fills Redis first (before the supervisor starts). It returns the
// worker as it was, the log's mark from before the restart and when Redis
// was started again (before the server began).
func unseenRestart(t *testing.T, hb supervisor.Heartbeat, load func(*testing.T, *redis.Client)) (h *harness, before health.Component, mark int, started time.Time) {
	t.Helper()
	clk := &heldClock{}
	h, srv := serverHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    shortBackoff,
		Heartbeat: hb,
		Clock:     clk,
	})
	if load != nil {
		opt, err := redis.ParseURL(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opt)
		load(t, c)
		_ = c.Close()
	}
	h.start()
	before = h.waitHealthy(ids("q", 1)...)[0]
	ttl := h.cfg.Heartbeat.TTL

	clk.hold(t)
	mark = h.logs.mark()
	if err := syscall.Kill(before.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(before.PID, syscall.SIGCONT) })
	stopped := time.Now()
	srv.Save()
	srv.Stop()
	<-time.After(time.Until(stopped.Add(ttl + ttl/4)))
	started = time.Now()
	srv.Start()
	clk.release()
	return h, before, mark, started
}

// verdict waits for the monitor's verdict on the worker after an unseen
// restart: judged again (true) or killed (false). The monitor must not
// have seen the restart: no call of its failed or answered slowly, or
// the test tests nothing.
func verdict(t *testing.T, h *harness, mark int) (int, bool) {
	t.Helper()
	at := h.logs.waitAny(t, mark, waitTimeout+h.cfg.Heartbeat.TTL, "did not see: judged again", "killing worker")
	for i := mark; i < at; i++ {
		if line := h.logs.line(i); strings.Contains(line, "redis unreachable") || strings.Contains(line, "answered slowly") ||
			strings.Contains(line, "waited on redis") || strings.Contains(line, "redis refuses") || strings.Contains(line, "reachable again") {
			t.Fatalf("the monitor saw the restart (the test's set-up failed): %s", line)
		}
	}
	return at, strings.Contains(h.logs.line(at), "judged again")
}

// TestRedisRestartUnseenKillsNothing: Redis restarts (keeping its data)
// while the monitor cannot run, so that no call of the monitor fails or
// waits: it sees no outage. The worker could not beat meanwhile and its
// key expired in the restart; when the monitor runs again the key is gone
// and the record is there, as for a hang. It is no hang: the monitor asks
// Redis when it started, and judges the worker a TTL later instead. The
// worker lives, nothing is counted. (Seen in CI, a machine compiling
// every -race package beside the chaos suite: TestRedisRestartKeepingData,
// Redis away 720 ms, two healthy workers killed and counted.) With a data
// set that takes Redis longer than a TTL to load, as well: the grace
// counts from the monitor's first sight of the restarted server, not
// from its start (the load, which INFO's uptime includes, is time no
// worker can beat).
func TestRedisRestartUnseenKillsNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		hb   supervisor.Heartbeat
		load func(*testing.T, *redis.Client)
	}{
		{"quick", stallBeat, nil},
		{"a long load", fastBeat, bigDataSet},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, before, mark, started := unseenRestart(t, tt.hb, tt.load)
			ttl := h.cfg.Heartbeat.TTL
			at, judged := verdict(t, h, mark)
			if !judged {
				t.Fatalf("a worker killed for a restart of Redis: %s\n%s", h.logs.line(at), h.logs.since(mark))
			}
			t.Logf("Redis started %v before the monitor's verdict", logTime(t, h.logs.line(at)).Sub(started).Round(time.Millisecond))
			if err := syscall.Kill(before.PID, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// The grace and a TTL more: the worker, beating again, is not judged hung.
			newEventReader(t, h.store).expectNone(2*ttl, notRunning)

			after := h.waitHealthy(ids("q", 1)...)[0]
			if after.PID != before.PID || after.Restarts.RestartCount != 0 || after.Restarts.LifetimeRestarts != 0 {
				t.Errorf("after the restart: %s; before: %s", describe(after), describe(before))
			}
			if _, killed := h.logs.find(mark, "killing worker"); killed {
				t.Errorf("a worker killed:\n%s", h.logs.since(mark))
			}
			if c := h.sync()[0]; c.Status != health.StatusHealthy || c.PID != before.PID {
				t.Errorf("the monitor holds %s", describe(c))
			}
		})
	}
}

// bigDataSet fills Redis with about 250 MB in 3 million keys: loading
// them takes redis-server more than a second (a 1 s TTL). In pipelines of
// MSETs, none of which holds Redis for long.
func bigDataSet(t *testing.T, c *redis.Client) {
	const keys, perMSet, perPipe = 3_000_000, 1000, 50
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	value := strings.Repeat("x", 32)
	args := make([]any, 0, 2*perMSet)
	for i := 0; i < keys; i += perMSet * perPipe {
		pipe := c.Pipeline()
		for j := i; j < min(i+perMSet*perPipe, keys); j += perMSet {
			args = args[:0]
			for k := j; k < j+perMSet; k++ {
				args = append(args, "load:"+strconv.Itoa(k), value)
			}
			pipe.MSet(ctx, args...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// logTime is the time= of a log line.
func logTime(t *testing.T, line string) time.Time {
	t.Helper()
	v, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("no time in %q: %v", line, err)
	}
	return at
}

// TestHangAfterRedisRestartKilled: the grace a restart gives is one TTL,
// not an amnesty: a worker hung across a restart (here it stays frozen)
// is killed a TTL after the monitor saw the restarted server, and the
// next deadline is not put off again.
func TestHangAfterRedisRestartKilled(t *testing.T) {
	t.Parallel()
	h, before, mark, _ := unseenRestart(t, stallBeat, nil)
	ttl := h.cfg.Heartbeat.TTL

	at, judged := verdict(t, h, mark)
	if !judged {
		t.Fatalf("killed without the grace: %s", h.logs.line(at))
	}
	kill := h.logs.wait(t, at, waitTimeout+2*ttl, "killing worker", "heartbeat expired")
	if d := logTime(t, h.logs.line(kill)).Sub(logTime(t, h.logs.line(at))); d < ttl {
		t.Errorf("killed %v after the grace began, within its TTL (%v): %s", d, ttl, h.logs.line(kill))
	}
	if _, again := h.logs.find(at+1, "did not see: judged again"); again {
		t.Errorf("the grace given twice for one restart:\n%s", h.logs.since(mark))
	}
	h.waitFor(ids("q", 1)[0], func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != before.PID })
}

// TestHangKilledWhenInfoDropsTheConnection (review of c19eae5, invariant
// 4): a proxy in front of Redis that answers every command but INFO, on
// which it drops the connection (as a proxy may on a command it does not
// serve). The monitor asks INFO server before each hang kill, and a call
// that fails without a reply is an outage: the worker is judged again
// after Redis's return, a TTL later. Before, that went on for as long as
// the worker hung: it was never killed, and the monitor began an outage
// every TTL. Now the monitor PINGs the same server at once: it answers,
// so INFO is what fails, and the hang is judged without it. Three workers
// hang together, and each is killed at its first judgement, no outage
// begun (a count of failures per process killed them one per outage).
func TestHangKilledWhenInfoDropsTheConnection(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	p, _ := env.Proxied(t)
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr, opt.MaxRetries = p.Addr(), -1 // each INFO sent once, each dropped
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var drops atomic.Int64
	wg.Go(func() {
		isInfo := func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "info") }
		for {
			select {
			case <-p.DropReply(isInfo):
				drops.Add(1)
			case <-ctx.Done():
				p.DropReply(nil)
				return
			}
		}
	})
	h := newHarnessOn(t, rdb, env.URL, env.Prefix, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 3, Command: []string{testWorker, "beat"}}},
		Policy:    shortBackoff,
		Heartbeat: fastBeat,
	})
	h.start()
	before := h.waitHealthy(ids("q", 3)...)
	mark := h.logs.mark()
	for _, c := range before {
		if err := syscall.Kill(c.PID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(c.PID, syscall.SIGCONT) })
	}

	// Each killed at its key's expiry, a TTL from the freeze.
	ttl := h.cfg.Heartbeat.TTL
	last := mark
	for range before {
		last = h.logs.wait(t, last, waitTimeout+ttl, "killing worker", "heartbeat expired") + 1
	}
	if n := drops.Load(); n < 3 {
		t.Errorf("%d INFO calls dropped before the kills, want one per worker", n)
	}
	if _, ok := h.logs.find(mark, "redis answers PING but INFO server fails without a reply"); !ok {
		t.Errorf("no warning that INFO fails:\n%s", h.logs.since(mark))
	}
	for i := mark; i < last; i++ {
		if strings.Contains(h.logs.line(i), "redis unreachable") {
			t.Errorf("an outage begun for INFO's failure: %s\n%s", h.logs.line(i), h.logs.since(mark))
		}
	}
	for i, c := range before {
		h.waitFor(ids("q", 3)[i], func(r health.Component) bool { return r.Status == health.StatusHealthy && r.PID != c.PID })
	}
}
