package supervisor_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// stopWithin stops h's supervisor and fails the test if Stop has not
// returned within d.
func stopWithin(t *testing.T, h *harness, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		done <- h.sup.Stop(ctx)
	}()
	if err := receive(t, done, d+3*time.Second, "Stop to return"); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestRestartDuringReleaseIsRefused (issue 12, defect 2): an operator
// restart of a worker whose slot is being released (here: the pool
// shrank) is refused; no process is started for the slot once released,
// and Stop returns.
func TestRestartDuringReleaseIsRefused(t *testing.T) {
	t.Parallel()
	h := fenceHarness(t, 2)
	killStrays(t, h.cfg.Prefix)
	id := ids("q", 2)
	h.start()
	h.waitHealthy(id...)
	ev := newEventReader(t, h.store)
	if err := supervisor.SetPoolSize(context.Background(), h.store, "q", 1); err != nil {
		t.Fatal(err)
	}
	// The worker ignores SIGTERM: the release lasts stop_timeout.
	h.waitFor(id[1], isStatus(health.StatusStopping))
	ctx, cancel := context.WithTimeout(context.Background(), 3*h.cfg.StopTimeout)
	c, err := h.sup.Restart(ctx, id[1])
	cancel()
	t.Logf("restart during the release: %v", err)
	if err == nil {
		t.Errorf("a restart during a release was accepted: %s", describe(c))
	}
	ev.waitEvent(id[1], func(w health.WorkerView) bool { return w.Status == string(health.StatusStopped) })
	h.sync()
	if pids := liveWorkers(t, h.cfg.Prefix)[id[1].String()]; len(pids) > 0 {
		t.Errorf("%s released, yet processes %v run for it", id[1], pids)
	}
	stopWithin(t, h, h.cfg.StopTimeout+2*time.Second)
}

// TestQueuedRestartsStartOneProcess (issue 12, defect 2): two operator
// restarts of one worker during a Redis outage (no record write can refuse
// anything), the second arriving while the first waits for the old
// process to stop, start one process between them, the one the
// supervisor tracks.
func TestQueuedRestartsStartOneProcess(t *testing.T) {
	t.Parallel()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	// A prefix of its own: liveWorkers finds the workers by it, among every
	// test process on the machine.
	prefix := "vq" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	h := newHarnessOn(t, rdb, srv.URL, prefix, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "ignore-term"}}},
		Policy:      longBackoff,
		StopTimeout: 2 * time.Second,
	})
	killStrays(t, h.cfg.Prefix)
	id := health.ComponentID{Queue: "q"}
	h.start()
	old := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	mark := h.logs.mark()
	srv.Save()
	srv.Stop()
	h.logs.wait(t, mark, waitTimeout, "redis unreachable")

	type res struct {
		c   health.Component
		err error
	}
	results := make(chan res, 2)
	restart := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*h.cfg.StopTimeout)
		defer cancel()
		c, err := h.sup.Restart(ctx, id)
		results <- res{c, err}
	}
	go restart()
	// The monitor's own view says when the first restart is stopping the
	// old process (Redis is away: the stream says nothing).
	deadline := time.Now().Add(waitTimeout)
	for h.sync()[0].Status != health.StatusStopping {
		if time.Now().After(deadline) {
			t.Fatal("the first restart did not stop the worker")
		}
		<-time.After(10 * time.Millisecond) // polling the monitor's view
	}
	go restart()
	var pid int
	for range 2 {
		r := receive(t, results, 4*h.cfg.StopTimeout, "a restart's answer")
		if r.err != nil {
			t.Errorf("restart: %v", r.err)
		}
		pid = max(pid, r.c.PID)
	}
	// No process starts while Redis is away (E40): the restarts hold the
	// start until it answers, and then one process runs.
	if pids := liveWorkers(t, h.cfg.Prefix)[id.String()]; len(pids) != 0 {
		t.Errorf("after two restarts during the outage %s runs as %v (old %d)", id, pids, old)
	}
	srv.Start()
	c := h.waitFor(id, func(c health.Component) bool { return c.Status == health.StatusHealthy && c.PID != old })
	if pids := liveWorkers(t, h.cfg.Prefix)[id.String()]; len(pids) != 1 || pids[0] != c.PID {
		t.Errorf("once Redis answers %s runs as %v; the supervisor tracks %d (old %d)", id, pids, c.PID, old)
	}
	stopWithin(t, h, h.cfg.StopTimeout+2*time.Second)
}
