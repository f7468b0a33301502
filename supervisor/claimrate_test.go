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
	// When a takes each of b's leases, sampled every 10 ms (the claims of
	// one tick go out in one round trip; the next tick is 300 ms later).
	takenAt := map[string]time.Time{}
	deadline := time.Now().Add(8 * clusterLease)
	for len(takenAt) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("a holds %d of b's 4 slots", len(takenAt))
		}
		vals, err := store.LeaseHolders(ctx, bLeases)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for i, v := range vals {
			if _, seen := takenAt[bLeases[i]]; !seen && health.LeaseHost(v) == "a" {
				takenAt[bLeases[i]] = now
			}
		}
		<-time.After(10 * time.Millisecond) // sampling period
	}
	var at []time.Time
	for _, v := range takenAt {
		at = append(at, v)
	}
	// A slot may have been taken early, as one more than the share, while
	// b still counted; the others must be taken together.
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	at = at[1:]
	if spread := at[len(at)-1].Sub(at[0]); spread > clusterLease/9 {
		t.Errorf("b's last %d slots were taken %s apart: at different ticks (a tick is %s)", len(at), spread, clusterLease/3)
	}
}
