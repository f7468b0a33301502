package supervisor_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestStaleExitIsNotACrash: the slot's record comes to name another host's
// process while this host still holds the lease (after a data loss, the
// other host's worker re-created the record by its heartbeat, and this host
// took the vanished lease back by renewing it). This host's worker finds
// itself stale and exits. That exit is no crash: nothing is counted, and
// the worker is started again only once the other host, fenced at its next
// renewal, has had stop_timeout to stop its process (fault explorer E17,
// seed 40052).
func TestStaleExitIsNotACrash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:      shortBackoff,
		Lease:       900 * time.Millisecond,
		StopTimeout: time.Second,
	})
	id := health.ComponentID{Queue: "q"}
	h.start()
	before := h.waitHealthy(id)[0]

	// What the other host's worker leaves: the record names it (its
	// heartbeat re-created it on an empty Redis: no instance).
	ev := newEventReader(t, h.store)
	other := os.Getpid()
	if err := h.rdb.HSet(context.Background(), h.store.Keys().Component(id),
		health.FieldPID, strconv.Itoa(other), health.FieldHost, "h2", health.FieldInstance, "").Err(); err != nil {
		t.Fatal(err)
	}
	exited := ev.waitEvent(id, func(w health.WorkerView) bool { return w.PID == before.PID && w.Status != string(health.StatusHealthy) })
	seen := time.Now()
	after := ev.waitEvent(id, func(w health.WorkerView) bool {
		return w.Status == string(health.StatusHealthy) && w.PID != before.PID && w.PID != other
	})
	if exited.RestartCount != 0 || after.RestartCount != 0 || after.LifetimeRestarts != 0 {
		t.Errorf("stale exit counted: exit %+v; then %+v", exited, after)
	}
	if wait, least := time.Since(seen), h.cfg.StopTimeout; wait < least {
		t.Errorf("started again %v after the stale exit, want at least stop_timeout %v (the other host's process may live until then)", wait, least)
	}
}
