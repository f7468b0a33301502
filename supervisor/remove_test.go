package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// waitRemoved reads the stream until every id has its worker_removed
// event, and returns them by id.
func (r *eventReader) waitRemoved(want ...health.ComponentID) map[health.ComponentID]health.WorkerView {
	r.tb.Helper()
	out := map[health.ComponentID]health.WorkerView{}
	deadline := time.Now().Add(waitTimeout)
	for len(out) < len(want) {
		evs := r.next(deadline)
		if evs == nil {
			r.tb.Fatalf("timed out waiting for worker_removed of %v (got %d)", want, len(out))
		}
		for _, ev := range evs {
			if ev.Type != health.EventWorkerRemoved || ev.Worker == nil {
				continue
			}
			id, err := health.ParseComponentID(ev.Worker.Component)
			if err == nil && slices.Contains(want, id) {
				out[id] = *ev.Worker
			}
		}
	}
	return out
}

// assertGone checks that nothing of id is left in Redis.
func assertGone(tb testing.TB, store *health.Store, id health.ComponentID) {
	tb.Helper()
	ctx, k := context.Background(), store.Keys()
	for _, key := range []string{k.Component(id), k.Restarts(id), k.Crashes(id), k.Heartbeat(id), k.WorkerStats(id), k.WorkerPause(id), k.Slot(id)} {
		if n := store.Client().Exists(ctx, key).Val(); n != 0 {
			tb.Errorf("%s: %s left behind", id, key)
		}
	}
	ids, err := store.IDs(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if slices.Contains(ids, id) {
		tb.Errorf("%s still listed", id)
	}
}

// A pool shrunk from 3 to 1: slots 1 and 2 are stopped, then their keys
// removed and their ids dropped, each with a worker_removed event that
// keeps its last state (issue 20).
func TestPoolShrinkRemovesSlotsBeyond(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 3, Command: []string{testWorker, "beat"}}},
	})
	id := ids("q", 3)
	h.start()
	h.waitHealthy(id...)
	ctx := context.Background()
	if _, err := h.store.PauseWorker(ctx, id[2], health.WorkerPause{At: time.Now(), By: "t"}); err != nil {
		t.Fatal(err)
	}
	ev := newEventReader(t, h.store)
	if err := supervisor.SetPoolSize(ctx, h.store, "q", 1); err != nil {
		t.Fatal(err)
	}
	got := ev.waitRemoved(id[1], id[2])
	for _, gone := range id[1:] {
		if w := got[gone]; w.Status != string(health.StatusStopped) || w.Reason != "pool shrink" {
			t.Errorf("%s removed as %+v, want its last state: stopped by the pool shrink", gone, w)
		}
		h.sync() // the removal is written before the monitor goes on
		assertGone(t, h.store, gone)
	}
	if c := h.get(id[0]); c.Status != health.StatusHealthy {
		t.Errorf("slot 0: %s", c.Status)
	}
}

// The operator's removal (DELETE /api/v1/workers/{c}): refused within the
// pool; done for a stopped slot beyond it that no host holds (a record
// left behind); not found for an unknown one.
func TestRemoveStoppedSlotBeyondPool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
	})
	in := health.ComponentID{Queue: "q"}
	left := health.ComponentID{Queue: "q", Slot: 5}
	ctx := context.Background()
	// A record left behind by an older Vigil: stopped, no lease.
	if _, err := h.store.Write(ctx, health.Component{ID: left, Status: health.StatusStopped, Reason: "pool shrink",
		Host: "gone", UpdatedAt: time.Now()}, health.Write{NoCheck: true, NoEvent: true, Index: true}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitHealthy(in)
	if err := h.sup.Remove(ctx, in); !errors.Is(err, supervisor.ErrInPool) || !errors.Is(err, health.ErrTransition) {
		t.Errorf("remove within the pool: %v, want ErrInPool (409)", err)
	}
	ev := newEventReader(t, h.store)
	if err := h.sup.Remove(ctx, left); err != nil {
		t.Fatalf("remove a stopped slot beyond the pool: %v", err)
	}
	ev.waitRemoved(left)
	assertGone(t, h.store, left)
	if err := h.sup.Remove(ctx, health.ComponentID{Queue: "q", Slot: 9}); !errors.Is(err, health.ErrNotFound) {
		t.Errorf("remove an unknown slot: %v, want not found", err)
	}
}
