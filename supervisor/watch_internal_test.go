package supervisor

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// These tests drive the claim step's decision to read every lease
// (needScan) for a host whose record missed a renewal, on the control hash
// and host records a tick reads. needScan reads nothing from Redis: the
// client below is never called.
//
// A lost host's slots are taken at its leases' expiry only if a scan put
// them in the free set by then; a slot left out waits for the random
// safety-net scan, one tick in three across the cluster: about a lease
// more, unbounded in the worst case.

// decider is host's supervisor running a pool of two slots for each of
// queues, on a 2 s lease, with no random safety-net scan, as seen by a
// tick's claim step.
func decider(t *testing.T, host string, leader bool, queues ...string) *Supervisor {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called
	t.Cleanup(func() { _ = rdb.Close() })
	var pools []Pool
	sizes := map[string]int{}
	for _, q := range queues {
		pools = append(pools, Pool{Queue: q, Workers: 2, Command: []string{"true"}})
		sizes[q] = 2
	}
	s, err := New(Config{
		Host: host, Lease: 2 * time.Second, Pools: pools,
		Heartbeat: Heartbeat{Interval: 100 * time.Millisecond, TTL: time.Second},
		Rand:      func() float64 { return 0.99 }, // never the safety net
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, health.NewStore(rdb, "watch:", 0))
	if err != nil {
		t.Fatal(err)
	}
	s.cluster.sizes = sizes
	s.cluster.scannedSizes = sizesSignature(sizes) // no pool size change to scan for
	s.cluster.leader = leader
	return s
}

// lateX is what a tick reads: hosts a (the leader) and b renewed a moment
// ago; host x, whose record has seen_at seen, missed a renewal (0.8 s of
// its 2 s lease left).
func lateX(aQueues, bQueues, xQueues []string, seen time.Time) control {
	now := time.Now()
	return control{raw: map[string]string{}, hosts: []health.Host{
		{ID: "a", Alive: true, Leader: true, Queues: aQueues, SeenAt: now, TTL: 1900 * time.Millisecond, Slots: 1},
		{ID: "b", Alive: true, Queues: bQueues, SeenAt: now, TTL: 1900 * time.Millisecond, Slots: 1},
		{ID: "x", Alive: true, Queues: xQueues, SeenAt: seen, TTL: 800 * time.Millisecond, Slots: 2},
	}}
}

// goneX is ctl once x's record expired: the hosts index still lists x,
// with the seen_at of its last record.
func goneX(ctl control, seen time.Time) control {
	out := control{raw: ctl.raw, hosts: append([]health.Host(nil), ctl.hosts...)}
	for i, h := range out.hosts {
		if h.ID == "x" {
			out.hosts[i] = health.Host{ID: "x", SeenAt: seen}
		}
	}
	return out
}

// tick runs s's scan decision on ctl and, as claimFrom does once its scan
// is done, writes the watched notes it made into ctl.
func tick(s *Supervisor, ctl control) bool {
	scan := s.needScan(ctl, false)
	for f, v := range s.cluster.watching {
		ctl.raw[f] = v
	}
	s.cluster.watching = nil
	return scan
}

// TestLateHostWatchedForEachQueue: x runs q1 and q2; a (the leader) runs
// q1 only, b runs q2 only. a's scan reads q1's leases only. The note it
// wrote used to be one per host: b, the only host that can show x's q2
// slots free, then scanned neither while x was late nor once it was gone,
// and x's q2 slots waited for the safety net (fails before the fix: "no
// host reads x's q2 leases").
func TestLateHostWatchedForEachQueue(t *testing.T) {
	seen := time.Now().Add(-1200 * time.Millisecond)
	ctl := lateX([]string{"q1"}, []string{"q2"}, []string{"q1", "q2"}, seen)
	a, b := decider(t, "a", true, "q1"), decider(t, "b", false, "q2")
	for _, s := range []*Supervisor{a, b} {
		s.cluster.alive = map[string][]string{"a": {"q1"}, "b": {"q2"}, "x": {"q1", "q2"}} // as the last tick saw them
	}
	if !tick(a, ctl) {
		t.Fatal("a, the leader, did not scan for late host x")
	}
	if !tick(b, ctl) && !tick(b, goneX(ctl, seen)) {
		t.Fatal("no host reads x's q2 leases: b, q2's only host, scanned neither while x was late (a's note covers q1) nor once x was gone")
	}
	// Both noted, every queue of x: the note is the seen_at alone, and
	// nobody scans again for this record, late or gone.
	if n := ctl.raw[fieldWatchedPrefix+"x"]; !noteFor(n, seen) || strings.Contains(n, "|") {
		t.Errorf("note %q once both of x's queues were scanned: want its seen_at alone", n)
	}
	for _, s := range []*Supervisor{a, b} {
		if tick(s, ctl) || tick(s, goneX(ctl, seen)) {
			t.Errorf("%s scanned again after both queues were noted (note %q)", s.cfg.Host, ctl.raw[fieldWatchedPrefix+"x"])
		}
	}
}

// TestLateHostWatchedForSharedQueuesOnly: x runs q1 and q2; a (the
// leader) runs q1 and q3, b runs q2. a's note names q1 only: q3 is not
// x's, and the note must still leave q2 to b.
func TestLateHostWatchedForSharedQueuesOnly(t *testing.T) {
	seen := time.Now().Add(-1200 * time.Millisecond)
	ctl := lateX([]string{"q1", "q3"}, []string{"q2"}, []string{"q1", "q2"}, seen)
	a, b := decider(t, "a", true, "q1", "q3"), decider(t, "b", false, "q2")
	if !tick(a, ctl) {
		t.Fatal("a, the leader, did not scan for late host x")
	}
	if n, want := ctl.raw[fieldWatchedPrefix+"x"], watchNote("", seen, []string{"q1"}, nil); n != want {
		t.Errorf("a's note = %q, want %q (x's queues that a runs)", n, want)
	}
	if !tick(b, ctl) {
		t.Error("b, q2's watcher, did not scan for late host x")
	}
}

// TestHostGoneSharingNoQueue: a host gone that nobody watched is scanned
// for by the hosts that run one of its queues; one that runs none of them
// would read no lease of the gone host.
func TestHostGoneSharingNoQueue(t *testing.T) {
	seen := time.Now().Add(-2500 * time.Millisecond)
	gone := goneX(lateX([]string{"q1"}, []string{"q2"}, []string{"q2"}, seen), seen)
	a, b := decider(t, "a", true, "q1"), decider(t, "b", false, "q2")
	for _, s := range []*Supervisor{a, b} {
		s.cluster.alive = map[string][]string{"a": {"q1"}, "b": {"q2"}, "x": {"q2"}}
	}
	if tick(a, gone) {
		t.Error("a scanned for gone host x, which ran none of its queues")
	}
	if !tick(b, gone) {
		t.Error("b did not scan for gone host x, unwatched, which ran its queue q2")
	}
}

// TestLateHostWatchedOneQueue is BenchmarkFailover's shape: every host
// runs the one queue q. The leader's scan covers every slot of x, and its
// note spares b a scan.
func TestLateHostWatchedOneQueue(t *testing.T) {
	seen := time.Now().Add(-1200 * time.Millisecond)
	q := []string{"q"}
	ctl := lateX(q, q, q, seen)
	a, b := decider(t, "a", true, "q"), decider(t, "b", false, "q")
	for _, s := range []*Supervisor{a, b} {
		s.cluster.alive = map[string][]string{"a": q, "b": q, "x": q}
	}
	if !tick(a, ctl) {
		t.Fatal("a, the leader, did not scan for late host x")
	}
	if n := ctl.raw[fieldWatchedPrefix+"x"]; n != strconv.FormatInt(seen.UnixMilli(), 10) {
		t.Errorf("note %q: want x's seen_at alone, as an earlier version writes and reads it", n)
	}
	if tick(b, ctl) || tick(b, goneX(ctl, seen)) {
		t.Error("b scanned for x although a's scan read every lease of x's only queue")
	}
}

// TestHostGoneUnwatchedForMyQueue: x, running q1 and q2, is gone; the note
// names q1 only (q2's watcher failed with it). b runs q2 and scans; a,
// running q1 only, does not.
func TestHostGoneUnwatchedForMyQueue(t *testing.T) {
	seen := time.Now().Add(-100 * time.Millisecond)
	alive := lateX([]string{"q1"}, []string{"q2"}, []string{"q1", "q2"}, seen)
	alive.hosts[2].TTL = 1900 * time.Millisecond // x not late yet
	a, b := decider(t, "a", true, "q1"), decider(t, "b", false, "q2")
	for _, s := range []*Supervisor{a, b} {
		tick(s, alive)
	}
	gone := goneX(alive, seen)
	gone.raw[fieldWatchedPrefix+"x"] = watchNote("", seen, []string{"q1"}, []string{"q1", "q2"})
	if tick(a, gone) {
		t.Error("a scanned for gone host x although the note covers q1, its only queue")
	}
	if !tick(b, gone) {
		t.Error("b did not scan for gone host x: the note does not cover q2")
	}
}

// TestWatchNote: notes merge the queues of one record's watchers, start
// over for a newer record, and a note of an earlier version (seen_at
// alone) covers every queue.
func TestWatchNote(t *testing.T) {
	seen := time.UnixMilli(1_700_000_000_000)
	x := []string{"q1", "q2", "q4"}
	n := watchNote("", seen, []string{"q2"}, x)
	if n != "1700000000000|q2" {
		t.Fatalf("first note = %q", n)
	}
	if n = watchNote(n, seen, []string{"q1", "q2"}, x); n != "1700000000000|q1,q2" {
		t.Fatalf("merged note = %q", n)
	}
	if got := watchNote(n, seen, []string{"q4"}, x); got != "1700000000000" {
		t.Fatalf("note covering every queue of x = %q, want its seen_at alone", got)
	}
	if got := watchNote(n, seen, []string{"q4"}, nil); got != "1700000000000|q1,q2,q4" {
		t.Fatalf("note for a record listing no queues = %q", got)
	}
	if got := watchNote(n, seen.Add(time.Second), []string{"q3"}, x); got != "1700000001000|q3" {
		t.Fatalf("note for a newer record = %q", got)
	}
	ctl := control{raw: map[string]string{fieldWatchedPrefix + "x": n}}
	for _, c := range []struct {
		queues []string
		seen   time.Time
		want   bool
	}{
		{[]string{"q1"}, seen, true},
		{[]string{"q1", "q2"}, seen, true},
		{[]string{"q1", "q3"}, seen, false},
		{nil, seen, true},
		{[]string{"q1"}, seen.Add(time.Millisecond), false},
	} {
		if got := watched(ctl, "x", c.seen, c.queues); got != c.want {
			t.Errorf("watched(%q, %v, %v) = %v, want %v", n, c.seen.UnixMilli(), c.queues, got, c.want)
		}
	}
	ctl.raw[fieldWatchedPrefix+"x"] = "1700000000000" // an earlier version's
	if !watched(ctl, "x", seen, []string{"q9"}) {
		t.Error("a note without queues does not cover every queue")
	}
	if !noteFor("1700000000000", seen) || !noteFor(n, seen) || noteFor(n, seen.Add(time.Millisecond)) {
		t.Error("noteFor does not tell the record a note is for")
	}
}
