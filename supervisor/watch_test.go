package supervisor_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// watchLease is long enough that a host's tick (a third of it) sees a late
// record well before it expires, on a loaded machine too.
const watchLease = 3 * time.Second

// fakeHost is a host x of the cluster that the test plays: its record and
// its leases on slots, renewed every third of a lease until stop.
type fakeHost struct {
	t        *testing.T
	store    *health.Store
	slots    []health.ComponentID
	stop     chan struct{}
	done     chan struct{}
	lastSeen time.Time // seen_at of the last record written (after done)
}

func startFakeHost(t *testing.T, store *health.Store, slots []health.ComponentID) *fakeHost {
	t.Helper()
	x := &fakeHost{t: t, store: store, slots: slots, stop: make(chan struct{}), done: make(chan struct{})}
	if err := x.renew(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(x.done)
		tick := time.NewTicker(watchLease / 3) // x's own tick, as a real host's
		defer tick.Stop()
		for {
			select {
			case <-x.stop:
				return
			case <-tick.C:
				if err := x.renew(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	return x
}

// renew writes x's leases, then its record, as a host's tick does.
func (x *fakeHost) renew() error {
	ctx := context.Background()
	for _, id := range x.slots {
		if err := x.store.Client().Set(ctx, x.store.Keys().Slot(id), health.LeaseValue("x", "inst"), watchLease).Err(); err != nil {
			return err
		}
	}
	hn, _ := os.Hostname()
	now := time.Now()
	x.lastSeen = now
	return x.store.WriteHost(ctx, health.Host{ID: "x", Instance: "inst", Hostname: hn, Slots: len(x.slots),
		Queues: []string{"q"}, StartedAt: now, SeenAt: now}, watchLease)
}

// halt stops x's renewals, as a host SIGKILLed or cut off from Redis.
func (x *fakeHost) halt() {
	close(x.stop)
	<-x.done
}

// watchMembers starts hosts a, b and c (no random scan: Rand is 0.99) on
// env's pool q of n slots.
func watchMembers(t *testing.T, env *testredis.Env, n int) []*harness {
	var hs []*harness
	for _, id := range []string{"a", "b", "c"} {
		h := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
			Host: id, Lease: watchLease, Rand: func() float64 { return 0.99 },
			Pools:  []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
			Policy: shortBackoff,
		})
		h.start()
		hs = append(hs, h)
	}
	return hs
}

func scans(hs []*harness) []int64 {
	out := make([]int64, len(hs))
	for i, h := range hs {
		out[i] = h.sup.Scans()
	}
	return out
}

// TestLateHostWatchedByOneHost (issue 14, P8): when a host's record
// misses its renewals, one host (the watcher: the leader) reads every
// lease and puts the late host's slots in the free set before they expire;
// the others only read the free set, and take them at once when they do.
func TestLateHostWatchedByOneHost(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	all := ids("q", 8)
	x := startFakeHost(t, store, all[6:])
	hs := watchMembers(t, env, 8)
	waitSpreadWithin(t, store, 6, []string{"a", "b", "c"}, 2, 4*waitTimeout)

	before := scans(hs)
	x.halt()
	expiry := x.lastSeen.Add(watchLease)
	t.Logf("x halted: its record and leases expire at +%s", time.Until(expiry).Round(time.Millisecond))
	// Before x's leases expire, its slots are in the free set.
	for {
		free, err := store.FreeSlots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(free, all[6]) && slices.Contains(free, all[7]) {
			break
		}
		if time.Now().After(expiry) {
			t.Fatalf("x's leases expired before its slots were in the free set: %v", free)
		}
		<-time.After(10 * time.Millisecond) // sampling the free set
	}
	left := time.Until(expiry)
	ttl, err := store.Client().PTTL(ctx, store.Keys().Slot(all[6])).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("x's lease on %s: PTTL %v, %v: already expired when its slot was shown free", all[6], ttl, err)
	}
	t.Logf("x's slots in the free set %s before its leases expire", left.Round(time.Millisecond))
	seen, err := store.Client().HGet(ctx, store.Keys().Control(), "watched:x").Result()
	if err != nil || seen != strconv.FormatInt(x.lastSeen.UnixMilli(), 10) {
		t.Errorf("watched:x = %q, %v: want x's last seen_at %d", seen, err, x.lastSeen.UnixMilli())
	}

	// Taken at once after the leases expire: the hosts' ticks were armed
	// for it.
	took := map[string]int{}
	for _, id := range all[6:] {
		c := waitForWithin(t, store, id, func(c health.Component) bool {
			return c.Status == health.StatusHealthy && c.Host != "" && c.Host != "x"
		}, 4*waitTimeout)
		took[c.Host]++
	}
	t.Logf("x's slots healthy on %v %s after its leases expired", took, time.Since(expiry).Round(time.Millisecond))
	after := scans(hs)
	var scanned []string
	for i := range hs {
		if after[i] > before[i] {
			scanned = append(scanned, []string{"a", "b", "c"}[i])
		}
	}
	if len(scanned) != 1 {
		t.Fatalf("hosts that read every lease for x: %v (scans before %v, after %v): want one, the watcher", scanned, before, after)
	}
	watcher := scanned[0]
	if took[watcher] == len(all[6:]) {
		t.Errorf("only the watcher %s took x's slots: the others did not find them in the free set (%v)", watcher, took)
	}
	recs, err := store.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range recs {
		if h.ID == watcher && !h.Leader {
			t.Errorf("the watcher %s is not the leader (%+v)", watcher, recs)
		}
	}
}

// TestHostGoneUnwatchedIsScannedFor (issue 14, P8): a host whose record is
// gone without a watcher having seen it late (its record lost, or the
// watcher failed with it) is scanned for by every host, and its slots are
// taken when its leases expire.
func TestHostGoneUnwatchedIsScannedFor(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	all := ids("q", 8)
	x := startFakeHost(t, store, all[6:])
	hs := watchMembers(t, env, 8)
	waitSpreadWithin(t, store, 6, []string{"a", "b", "c"}, 2, 4*waitTimeout)

	before := scans(hs)
	x.halt()
	expiry := x.lastSeen.Add(watchLease)
	// x's record goes while fresh: no host sees it late.
	if err := store.Client().Del(ctx, store.Keys().Host("x")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range all[6:] {
		waitForWithin(t, store, id, func(c health.Component) bool {
			return c.Status == health.StatusHealthy && c.Host != "" && c.Host != "x"
		}, 4*waitTimeout)
	}
	t.Logf("x's slots healthy elsewhere %s after its leases expired", time.Since(expiry).Round(time.Millisecond))
	after := scans(hs)
	for i := range hs {
		if after[i] == before[i] {
			t.Errorf("host %s did not scan for x, gone unwatched (scans before %v, after %v)", []string{"a", "b", "c"}[i], before, after)
		}
	}
}
