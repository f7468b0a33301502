package health_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// TestRenewLeasesTellsRetakenFromHeld: a renewal extends a lease still
// ours, takes again one that is gone (it lapsed, or Redis lost it) and
// says so, and leaves another holder's alone (fault explorer E18: a hold
// that broke is told from one that did not).
func TestRenewLeasesTellsRetakenFromHeld(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	ctx := context.Background()
	rdb, me := store.Client(), health.LeaseValue("h1", "i1")
	keys := []string{store.Keys().Prefix + "lease:held", store.Keys().Prefix + "lease:gone", store.Keys().Prefix + "lease:other"}
	if err := rdb.Set(ctx, keys[0], me, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, keys[2], health.LeaseValue("h2", "i2"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := store.RenewLeases(ctx, keys, me, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []health.Renewal{health.LeaseHeld, health.LeaseRetaken, health.LeaseLost}; !slices.Equal(got, want) {
		t.Errorf("RenewLeases = %v, want %v", got, want)
	}
	if v, _ := rdb.Get(ctx, keys[1]).Result(); v != me {
		t.Errorf("a gone lease after its renewal: %q, want %q", v, me)
	}
	lost, err := store.Renew(ctx, keys, me, time.Minute)
	if err != nil || !slices.Equal(lost, []bool{false, false, true}) {
		t.Errorf("Renew = %v, %v", lost, err)
	}
}
