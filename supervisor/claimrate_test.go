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
	// When a takes each of b's leases, and when b's record is gone,
	// sampled every 10 ms (the claims of one tick go out in one round
	// trip; the next tick is 300 ms later).
	takenAt := map[string]time.Time{}
	afterGone := map[string]bool{} // taken after a sample that saw b gone
	var goneAt, lastRead time.Time
	deadline := time.Now().Add(8 * clusterLease)
	for len(takenAt) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("a holds %d of b's 4 slots", len(takenAt))
		}
		n, err := env.Client.Exists(ctx, store.Keys().Host("b")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && goneAt.IsZero() {
			goneAt = time.Now()
		}
		vals, err := store.LeaseHolders(ctx, bLeases)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for i, v := range vals {
			if _, seen := takenAt[bLeases[i]]; !seen && health.LeaseHost(v) == "a" {
				takenAt[bLeases[i]] = now
				// Not held at the previous read, which came after b was
				// seen gone: taken once b no longer counted.
				afterGone[bLeases[i]] = !goneAt.IsZero() && !lastRead.Before(goneAt)
			}
		}
		lastRead = now
		<-time.After(10 * time.Millisecond) // sampling period
	}
	// While b still counted, a may take one more than its share per tick;
	// what is left once b is gone is a's share, taken at one tick.
	var after []time.Time
	for k, v := range takenAt {
		if afterGone[k] {
			after = append(after, v)
		}
	}
	if len(after) < 2 {
		t.Logf("%d of b's slots were left when its record expired: nothing to compare", len(after))
		return
	}
	slices.SortFunc(after, func(x, y time.Time) int { return x.Compare(y) })
	if spread := after[len(after)-1].Sub(after[0]); spread > clusterLease/9 {
		t.Errorf("the %d slots left once b was gone were taken %s apart: at different ticks (a tick is %s)", len(after), spread, clusterLease/3)
	}
}
