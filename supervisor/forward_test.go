package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// forwardHarness runs h1 with pool q of two slots, slot 0 leased to host h2
// (which no supervisor runs): an action on q:0 is forwarded to h2. With
// alive, h2 has a live host record (it never answers); without, h2 is gone.
func forwardHarness(t *testing.T, alive bool) (*harness, health.ComponentID) {
	t.Helper()
	h := newHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 2, Command: []string{testWorker, "beat"}}},
		StopTimeout: time.Second,
	})
	ctx := context.Background()
	id := health.ComponentID{Queue: "q", Slot: 0}
	if err := h.rdb.Set(ctx, h.store.Keys().Slot(id), health.LeaseValue("h2", "i2"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if alive {
		if err := h.store.WriteHost(ctx, health.Host{ID: "h2", Instance: "i2", SeenAt: time.Now()}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	h.start()
	h.waitHealthy(health.ComponentID{Queue: "q", Slot: 1})
	return h, id
}

// TestForwardToAGoneHostAnswersAtOnce: the slot's lease names a host whose
// record is gone; an action on it is answered at once (ErrNoOwner: 409),
// not after a 30 s wait for a reply nobody will send (fault explorer E11).
func TestForwardToAGoneHostAnswersAtOnce(t *testing.T) {
	t.Parallel()
	h, id := forwardHarness(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := h.sup.Restart(ctx, id)
	took := time.Since(start)
	if !errors.Is(err, supervisor.ErrNoOwner) {
		t.Errorf("restart of a slot held by a gone host: %v, want ErrNoOwner", err)
	}
	if took > time.Second {
		t.Errorf("answered after %v, want at once", took)
	}
}

// TestForwardWaitIsBounded: the holder is alive but never answers; a
// forwarded action answers within stop_timeout + 2 s (invariant 6).
func TestForwardWaitIsBounded(t *testing.T) {
	t.Parallel()
	h, id := forwardHarness(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := h.sup.Restart(ctx, id)
	took := time.Since(start)
	if err == nil || !errors.Is(err, supervisor.ErrNoOwner) {
		t.Errorf("restart on a host that never answers: %v, want an ErrNoOwner error", err)
	}
	if bound := h.cfg.StopTimeout + 2*time.Second + time.Second; took > bound {
		t.Errorf("answered after %v, want within stop_timeout + 2 s (+1 s for a BLPOP slice)", took)
	}
}

// TestStopCancelsForwards: a rolling restart forwards a restart to a host
// that never answers; Stop ends it and returns in time, leaving no
// goroutine waiting on the reply list (fault explorer E11, seeds 5131,
// 20132).
func TestStopCancelsForwards(t *testing.T) {
	t.Parallel()
	h, _ := forwardHarness(t, true)
	if _, err := h.sup.RollingRestart(context.Background(), "q"); err != nil {
		t.Fatal(err)
	}
	// Acting as h2: the forwarded command arrives, and is never answered.
	res, err := h.rdb.BLPop(context.Background(), waitTimeout, h.store.Keys().Commands("h2")).Result()
	if err != nil {
		t.Fatalf("no command forwarded to h2: %v", err)
	}
	t.Logf("h2 got %s", res[1])
	budget := h.cfg.StopTimeout + 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	if err := h.sup.Stop(ctx); err != nil {
		t.Errorf("Stop with a forward in flight: %v after %v, want nil within %v", err, time.Since(start), budget)
	}
}
