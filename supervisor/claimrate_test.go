package supervisor_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestLostHostSlotsTakenInOneTick: a host below its fair share takes every
// free slot it wants at one tick, even when free slots were left at the
// previous one. The leases of a lost host expire before its record
// (renewed first in its tick), so a tick in between still counts that
// host and leaves them free; the next ticks used to take "one more" slot
// each instead of the whole share (the failover of a 1,000-slot host took
// a slot every third of a lease: BenchmarkControlPlane).
func TestLostHostSlotsTakenInOneTick(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	const n = 8
	// Host b is only its Redis keys: a record, and the leases of slots 4-7.
	hn, _ := os.Hostname()
	if err := store.WriteHost(ctx, health.Host{ID: "b", Instance: "x", Hostname: hn, PID: 1 << 22, Slots: 4,
		StartedAt: time.Now(), SeenAt: time.Now()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	bLeases := make([]string, 0, 4)
	for _, id := range ids("q", n)[4:] {
		k := store.Keys().Slot(id)
		bLeases = append(bLeases, k)
		if err := env.Client.Set(ctx, k, health.LeaseValue("b", "x"), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	a := member(t, env, "a", n)
	a.start()
	for _, id := range ids("q", n)[:4] {
		waitFor(t, store, id, isStatus(health.StatusHealthy))
	}
	// b stops: its leases are gone, and its record expires a lease later.
	if err := env.Client.Del(ctx, bLeases...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.PExpire(ctx, store.Keys().Host("b"), clusterLease).Err(); err != nil {
		t.Fatal(err)
	}
	held := func() (out []health.Component) {
		recs, err := store.GetMany(ctx, ids("q", n)[4:])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range recs {
			if c.Host == "a" && c.Status == health.StatusHealthy {
				out = append(out, c)
			}
		}
		return out
	}
	deadline := time.Now().Add(8 * clusterLease)
	for len(held()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("a holds %d of b's 4 slots", len(held()))
		}
		newEventReader(t, store).next(time.Now().Add(clusterLease))
	}
	var starts []time.Time
	for _, c := range held() {
		starts = append(starts, c.StartedAt)
	}
	// A slot may have been taken early, as one more than the share, while
	// b still counted; the others must be taken together.
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	starts = starts[1:]
	if spread := starts[len(starts)-1].Sub(starts[0]); spread > clusterLease/5 {
		t.Errorf("b's last %d slots were started %s apart: taken at different ticks (a tick is %s)", len(starts), spread, clusterLease/3)
	}
}
