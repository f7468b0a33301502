package supervisor_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	queues   []string // its record's
	stop     chan struct{}
	done     chan struct{}
	lastSeen time.Time // seen_at of the last record written (after done)
}

func startFakeHost(t *testing.T, store *health.Store, slots []health.ComponentID) *fakeHost {
	t.Helper()
	var queues []string
	for _, id := range slots {
		if !slices.Contains(queues, id.Queue) {
			queues = append(queues, id.Queue)
		}
	}
	x := &fakeHost{t: t, store: store, slots: slots, queues: queues, stop: make(chan struct{}), done: make(chan struct{})}
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
	if err := x.renewLeases(); err != nil {
		return err
	}
	ctx := context.Background()
	hn, _ := os.Hostname()
	now := time.Now()
	x.lastSeen = now
	return x.store.WriteHost(ctx, health.Host{ID: "x", Instance: "inst", Hostname: hn, Slots: len(x.slots),
		Queues: x.queues, StartedAt: now, SeenAt: now}, watchLease)
}

// renewLeases writes x's leases: the first step of a host's tick.
func (x *fakeHost) renewLeases() error {
	ctx := context.Background()
	for _, id := range x.slots {
		if err := x.store.Client().Set(ctx, x.store.Keys().Slot(id), health.LeaseValue("x", "inst"), watchLease).Err(); err != nil {
			return err
		}
	}
	return nil
}

// halt stops x's renewals, as a host SIGKILLed or cut off from Redis.
func (x *fakeHost) halt() {
	close(x.stop)
	<-x.done
}

// watchCluster is a cluster of hosts a, b and c (see watchMembers) with the
// fake host x holding slots 6 and 7 of pool q's 8, the 6 others spread 2
// per host.
func watchCluster(t *testing.T) (*health.Store, []health.ComponentID, *fakeHost, []*harness) {
	t.Helper()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	all := ids("q", 8)
	x := startFakeHost(t, store, all[6:])
	hs := watchMembers(t, env, len(all))
	waitSpreadWithin(t, store, 6, []string{"a", "b", "c"}, 2, 4*waitTimeout)
	return store, all, x, hs
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
	store, all, x, hs := watchCluster(t)
	ctx := context.Background()

	before := scans(hs)
	x.halt()
	expiry := x.lastSeen.Add(watchLease)
	t.Logf("x halted: its record and leases expire at +%s", time.Until(expiry).Round(time.Millisecond))
	// Before x's leases expire, its slots are in the free set.
	waitFreeBeforeExpiry(t, store, all[6:], expiry)
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
	// The watcher holds 2 of its share of 3 and takes one slot a tick:
	// another host took the other, and found it in the free set (it did
	// not scan).
	if took[watcher] == len(all[6:]) {
		t.Errorf("only the watcher %s took x's slots (%v)", watcher, took)
	}
	seen, err := store.Client().HGet(ctx, store.Keys().Control(), "watched:x").Result()
	if err != nil || seen != strconv.FormatInt(x.lastSeen.UnixMilli(), 10) {
		t.Errorf("watched:x = %q, %v: want x's last seen_at %d (alone: the watcher's scan covered x's one queue, as an earlier version writes it)", seen, err, x.lastSeen.UnixMilli())
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
	store, all, x, hs := watchCluster(t)
	ctx := context.Background()

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

// TestLateHostWatchedForEachOfItsQueues: x runs queues q1 and q2, host a
// runs q1 only and host b q2 only. A scan reads the scanning host's own
// queues' leases: a's, q1's. Each queue's watcher shows x's slots of it
// free before they expire. Before, the one note per host that the first
// scan wrote stopped the other's, and x's slot of the other queue was
// found only by a random safety-net scan, a lease or more after its
// expiry.
func TestLateHostWatchedForEachOfItsQueues(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	q1, q2 := ids("q1", 2), ids("q2", 2)
	x := startFakeHost(t, store, []health.ComponentID{q1[1], q2[1]})
	for _, m := range []struct{ host, queue string }{{"a", "q1"}, {"b", "q2"}} {
		h := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
			Host: m.host, Lease: watchLease, Rand: func() float64 { return 0.99 },
			Pools:  []supervisor.Pool{{Queue: m.queue, Workers: 2, Command: []string{testWorker, "beat"}}},
			Policy: shortBackoff,
		})
		h.start()
	}
	for _, id := range []health.ComponentID{q1[0], q2[0]} {
		waitForWithin(t, store, id, func(c health.Component) bool { return c.Status == health.StatusHealthy }, 4*waitTimeout)
	}
	x.halt()
	expiry := x.lastSeen.Add(watchLease)
	waitFreeBeforeExpiry(t, store, x.slots, expiry)
	for _, id := range x.slots {
		waitForWithin(t, store, id, func(c health.Component) bool {
			return c.Status == health.StatusHealthy && c.Host != "" && c.Host != "x"
		}, 4*waitTimeout)
	}
	t.Logf("x's slots healthy elsewhere %s after its leases expired", time.Since(expiry).Round(time.Millisecond))
}

// waitFreeBeforeExpiry waits until slots are all in the free set, and
// fails if their leases expire first.
func waitFreeBeforeExpiry(t *testing.T, store *health.Store, slots []health.ComponentID, expiry time.Time) {
	t.Helper()
	ctx := context.Background()
	for {
		pipe := store.Client().Pipeline()
		members := pipe.SMembers(ctx, store.Keys().Free())
		ttls := make([]*redis.DurationCmd, len(slots))
		for i, id := range slots {
			ttls[i] = pipe.PTTL(ctx, store.Keys().Slot(id))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		in, held := 0, 0
		for i, id := range slots {
			if slices.Contains(members.Val(), id.String()) {
				in++
			}
			if ttls[i].Val() > 0 {
				held++
			}
		}
		if in == len(slots) && held == len(slots) {
			t.Logf("x's slots in the free set, their leases held, %s before the expiry", time.Until(expiry).Round(time.Millisecond))
			return
		}
		if held < len(slots) {
			t.Fatalf("x's leases expired (%d of %d left) before its slots were all in the free set (%v)", held, len(slots), members.Val())
		}
		<-time.After(10 * time.Millisecond) // sampling the free set
	}
}

// TestHostDeadBetweenItsLeasesAndRecordIsWatched (review of P8): a host
// renews its leases at a tick's start and writes its record at its end; one
// that dies in between leaves leases fresher than its late record. The
// watcher shows them free all the same and the slots are taken when they
// expire (a watcher that took their expiry for a sign of life noted the
// host watched and left them to the random safety net, which this test
// turns off: stuck for good).
func TestHostDeadBetweenItsLeasesAndRecordIsWatched(t *testing.T) {
	store, all, x, hs := watchCluster(t)

	x.halt()
	// x's next tick, a third of a lease after its record: it renews its
	// leases and dies before writing its record.
	<-time.After(time.Until(x.lastSeen.Add(watchLease / 3))) // the simulated host's tick
	if err := x.renewLeases(); err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().Add(watchLease)
	waitFreeBeforeExpiry(t, store, all[6:], expiry)
	for _, id := range all[6:] {
		waitForWithin(t, store, id, func(c health.Component) bool {
			return c.Status == health.StatusHealthy && c.Host != "" && c.Host != "x"
		}, 4*waitTimeout)
	}
	t.Logf("x's slots healthy elsewhere %s after its leases expired (scans %v)", time.Since(expiry).Round(time.Millisecond), scans(hs))
}
