package supervisor_test

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/supervisor"
)

// heldClock is the wall clock, which the test can hold: while held, Now
// blocks its callers. Holding it stops the monitor at its next look at
// the time, as a machine too loaded to run it would (its timers, real
// time, still fire and wait for it).
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
	if gate != nil {
		buf := make([]byte, 64<<10)
		if bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("supervisor.(*Supervisor).monitor(")) {
			c.mu.Lock()
			select {
			case <-monitor:
			default:
				close(monitor)
			}
			c.mu.Unlock()
		}
		<-gate
	}
	return time.Now()
}

// hold stops the monitor; it returns once the monitor waits.
func (c *heldClock) hold(tb testing.TB) {
	tb.Helper()
	c.mu.Lock()
	c.gate, c.monitor = make(chan struct{}), make(chan struct{})
	monitor := c.monitor
	c.mu.Unlock()
	select {
	case <-monitor:
	case <-time.After(waitTimeout):
		tb.Fatal("the monitor did not look at the clock")
	}
}

// release lets the monitor go on.
func (c *heldClock) release() {
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
}

// unseenRestart runs one beat worker, holds the monitor, freezes the
// worker (its beats held back: it lives, and beats again if let go),
// restarts Redis keeping its data, away for longer than the key's TTL (an
// input: time passing, not a goroutine waited for), and lets the monitor
// go. It returns the worker as it was, the log's mark from before the
// restart and when Redis was started again (before the server began).
func unseenRestart(t *testing.T) (h *harness, before health.Component, mark int, started time.Time) {
	t.Helper()
	clk := &heldClock{}
	h, srv := serverHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
		Clock:  clk,
	})
	h.start()
	before = h.waitHealthy(ids("q", 1)...)[0]
	ttl := h.cfg.Heartbeat.TTL

	clk.hold(t)
	mark = h.logs.mark()
	if err := syscall.Kill(before.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	srv.Save()
	srv.Stop()
	<-time.After(time.Until(stopped.Add(ttl + ttl/4)))
	started = time.Now()
	srv.Start()
	clk.release()
	return h, before, mark, started
}

// TestRedisRestartUnseenKillsNothing: Redis restarts (keeping its data)
// while the monitor cannot run, so that no call of the monitor fails or
// waits: it sees no outage. The worker could not beat meanwhile and its
// key expired in the restart; when the monitor runs again the key is gone
// and the record is there, as for a hang. It is no hang: the monitor asks
// Redis when it started, and judges the worker a TTL after that instead.
// The worker lives, nothing is counted. (Seen in CI, a machine compiling
// every -race package beside the chaos suite: TestRedisRestartKeepingData,
// Redis away 720 ms, two healthy workers killed and counted.)
func TestRedisRestartUnseenKillsNothing(t *testing.T) {
	t.Parallel()
	h, before, mark, _ := unseenRestart(t)
	ttl := h.cfg.Heartbeat.TTL

	// The heartbeat deadline: judged again a TTL after Redis's start, or
	// (the defect) killed.
	at := h.logs.waitAny(t, mark, waitTimeout+ttl, "did not see: judged again", "killing worker")
	if line := h.logs.line(at); !strings.Contains(line, "judged again") {
		t.Fatalf("a worker killed for a restart of Redis: %s\n%s", line, h.logs.since(mark))
	}
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
}

// TestHangAfterRedisRestartKilled: the grace a restart gives is one TTL,
// not an amnesty: a worker hung across a restart (here it stays frozen)
// is killed once the restarted Redis has answered for a TTL.
func TestHangAfterRedisRestartKilled(t *testing.T) {
	t.Parallel()
	h, before, mark, started := unseenRestart(t)
	ttl := h.cfg.Heartbeat.TTL

	h.logs.wait(t, mark, waitTimeout+ttl, "did not see: judged again")
	kill := h.logs.wait(t, mark, waitTimeout+2*ttl, "killing worker", "heartbeat expired")
	// Not before the restarted Redis answered for a TTL (its start, read
	// in whole seconds, may be taken up to a second late, never early).
	if killedAt := time.Now(); killedAt.Before(started.Add(ttl)) {
		t.Errorf("killed %v after Redis started, within the TTL of grace (%v): %s", killedAt.Sub(started), ttl, h.logs.line(kill))
	}
	h.waitFor(ids("q", 1)[0], func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != before.PID })
}
