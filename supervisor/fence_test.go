package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// fenceHarness runs n workers of q that ignore SIGTERM (so that a fenced
// one lingers until its SIGKILL), with a short lease so that a lost lease
// is noticed within a third of it.
func fenceHarness(t *testing.T, n int) *harness {
	t.Helper()
	return newHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "ignore-term"}}},
		Policy:      longBackoff,
		Lease:       clusterLease,
		StopTimeout: 2 * time.Second,
	})
}

// thief is the host that takes slots over in these tests: it exists only
// as a lease and a record.
const thiefHost, thiefInstance = "thief", "i-thief"

// stealLease gives id's lease to the thief for a minute, as a host that
// took the slot over and has not written its record yet.
func stealLease(t *testing.T, h *harness, id health.ComponentID) {
	t.Helper()
	if err := h.rdb.Set(context.Background(), h.store.Keys().Slot(id), health.LeaseValue(thiefHost, thiefInstance), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// steal is stealLease plus the record the thief writes as the new owner
// (which makes the old process find itself stale and exit).
func steal(t *testing.T, h *harness, id health.ComponentID) health.Component {
	t.Helper()
	stealLease(t, h, id)
	c := health.Component{ID: id, Status: health.StatusHealthy, Host: thiefHost, Instance: thiefInstance,
		PID: deadPID(t), StartedAt: time.Now(), HealthySince: time.Now()}
	writeRecord(t, h.store, c)
	return h.get(id)
}

// sameRecord reports whether a and b are the same write of a record.
func sameRecord(a, b health.Component) bool {
	return a.Status == b.Status && a.Host == b.Host && a.Instance == b.Instance && a.PID == b.PID &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.Reason == b.Reason
}

// TestFencedHostDoesNotWriteOverTheNewOwner (issue 12, defect 1): a host
// whose lease on a slot was taken writes nothing more to that slot's
// record: not for an operator stop sent to it, not for its own shutdown,
// not for the exit of the old process (which finds itself stale once the
// new owner wrote the record).
func TestFencedHostDoesNotWriteOverTheNewOwner(t *testing.T) {
	t.Parallel()
	h := fenceHarness(t, 2)
	id := ids("q", 2)
	h.start()
	h.waitHealthy(id...)
	mark := h.logs.mark()
	// Slot 0: the new owner holds the lease and has not written yet; the
	// old process lingers (it ignores SIGTERM). Slot 1: the new owner has
	// written its record.
	stealLease(t, h, id[0])
	want := []health.Component{h.get(id[0]), steal(t, h, id[1])}
	for _, c := range id {
		h.logs.wait(t, mark, waitTimeout, "slot lease lost", "component="+c.String())
	}
	ev := newEventReader(t, h.store)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := h.sup.StopComponent(ctx, id[0])
	cancel()
	t.Logf("stop of a fenced worker: %v", err)
	if err == nil {
		t.Error("the fenced host stopped a worker whose slot it lost")
	}
	sctx, scancel := context.WithTimeout(context.Background(), h.cfg.StopTimeout+5*time.Second)
	defer scancel()
	if err := h.sup.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for i, c := range id {
		if got := h.get(c); !sameRecord(got, want[i]) {
			t.Errorf("%s after the fenced host acted on it: %s, want %s", c, describe(got), describe(want[i]))
		}
	}
	// What is in the stream now, and whatever comes in the next moment.
	ev.expectNone(200*time.Millisecond, func(w health.WorkerView) bool { return w.Host == h.cfg.Host })
}

// TestFencedWorkerKilledAfterStopTimeout (issue 12, defect 3): a fenced
// worker that ignores SIGTERM is SIGKILLed stop_timeout after the fence,
// however many ticks pass meanwhile.
func TestFencedWorkerKilledAfterStopTimeout(t *testing.T) {
	t.Parallel()
	h := fenceHarness(t, 1)
	id := health.ComponentID{Queue: "q"}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	mark := h.logs.mark()
	stealLease(t, h, id)
	h.logs.wait(t, mark, waitTimeout, "slot lease lost", "component="+id.String())
	fenced := time.Now()
	// Ticks come every third of a lease (300 ms); stop_timeout is 2 s.
	deadline := fenced.Add(h.cfg.StopTimeout + 2*time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("fenced worker %d still alive %s after the fence (stop_timeout %s)", pid, time.Since(fenced).Round(time.Millisecond), h.cfg.StopTimeout)
		}
		<-time.After(20 * time.Millisecond) // polling a process's state in /proc
	}
	t.Logf("fenced worker gone %s after the fence", time.Since(fenced).Round(time.Millisecond))
}
