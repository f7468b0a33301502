package supervisor_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestRecordRecreatedByTheOldProcessWhileWaitedFor: a host waits for an
// earlier supervisor's worker to exit before it starts the slot; Redis
// loses the slot's record meanwhile and that worker's next beat re-creates
// it (healthy, its pid: a heartbeat re-creates a record that is gone); then
// the worker exits. The host starts the slot over that record, which names
// a process that is gone, instead of staying for good "waiting for the
// previous supervisor's worker" with no process to wait for: the slot
// never ran again and the host's Stop never returned (fault explorer E25,
// seed 40052 with four seeds at a time: a FLUSHALL between a takeover and
// the old worker's exit). Since E27 the spawn's write goes through over
// such a record (it names no instance: no supervisor wrote it); before,
// it was refused and spawnOver wrote the record over first.
func TestRecordRecreatedByTheOldProcessWhileWaitedFor(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	id := health.ComponentID{Queue: "q"}
	// A heartbeat every 10 s: the old worker does not beat by itself
	// during the test (its beat would find the new instance's record and
	// exit as stale); the test beats in its name below.
	c := startHostProcess(t, env, "c", 1, clusterLease, "-mode", "ignore-term", "-interval", "10s", "-ttl", "30s")
	old := waitFor(t, store, id, isStatus(health.StatusHealthy))
	t.Cleanup(func() { _ = syscall.Kill(old.PID, syscall.SIGKILL) })
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	again := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Host: "c", Lease: clusterLease, StopTimeout: 5 * time.Second,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	again.start()
	again.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(old.PID))

	ctx := context.Background()
	if err := env.Client.Del(ctx, store.Keys().Component(id)).Err(); err != nil {
		t.Fatal(err)
	}
	hb := &health.Heartbeater{Store: store, ID: id, PID: old.PID, Host: "c", StartedAt: old.StartedAt,
		Interval: 10 * time.Second, TTL: 30 * time.Second}
	if r, err := hb.Beat(ctx); err != nil || r != health.BeatRecreated {
		t.Fatalf("the old worker's beat after the record was lost: %v, %v", r, err)
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	now := waitFor(t, store, id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.PID != old.PID && c.PID != 0
	})
	if now.Restarts.LifetimeRestarts != 0 {
		t.Errorf("a restart counted: %s", describe(now))
	}
	stopCtx, cancel := context.WithTimeout(ctx, again.cfg.StopTimeout+2*time.Second)
	defer cancel()
	if err := again.sup.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v\n%s", err, again.logs.String())
	}
}
