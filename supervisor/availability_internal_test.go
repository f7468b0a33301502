package supervisor

import (
	"testing"
	"time"
)

// TestAvailability: a heartbeat may be judged only once Redis has answered
// for a whole TTL; a failed call (until Redis is back) and a slow answer
// restart that count.
func TestAvailability(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_790_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		do   func(a *availability)
		now  int           // ms
		want time.Duration // answeredFor(ttl, now)
	}{
		{"never disturbed", func(a *availability) {}, 0, 0},
		{"fast calls", func(a *availability) { a.answered(at(0), at(200)) }, 300, 0},
		{"a slow call: a TTL from its end", func(a *availability) { a.answered(at(0), at(700)) }, 1200, 500 * time.Millisecond},
		{"a TTL after a slow call", func(a *availability) { a.answered(at(0), at(700)) }, 1700, 0},
		{"down: never", func(a *availability) { a.lost() }, 5000, ttl},
		{"back: a TTL from its return", func(a *availability) { a.lost(); a.back(at(2000)) }, 2400, 600 * time.Millisecond},
		{"an older slow call does not shorten the grace", func(a *availability) {
			a.lost()
			a.back(at(2000))
			a.answered(at(0), at(1500))
		}, 2400, 600 * time.Millisecond},
		{"a short unwatched step: nothing", func(a *availability) { a.unseen(at(0), at(200)) }, 300, 0},
		{"an unwatched step longer than slow: a TTL from its end (E26)", func(a *availability) {
			a.answered(at(0), at(10))
			a.unseen(at(100), at(1100))
			a.answered(at(1150), at(1160)) // a fast read right after it does not end the grace
		}, 1200, 900 * time.Millisecond},
		{"a restart learnt after the fact: a TTL from then", func(a *availability) {
			a.answered(at(0), at(10))
			a.restarted(wholeRedis, "r1", at(700), at(800))
		}, 1000, 800 * time.Millisecond},
		{"a restart counted once per run", func(a *availability) {
			a.restarted(wholeRedis, "r1", at(700), at(800))
			a.restarted(wholeRedis, "r1", at(1700), at(1900)) // its start read a second later
		}, 2000, 0},
		{"the next run counts again", func(a *availability) {
			a.restarted(wholeRedis, "r1", at(700), at(800))
			a.restarted(wholeRedis, "r2", at(1500), at(1900))
		}, 2000, 900 * time.Millisecond},
		{"a server started before the last grace gives none", func(a *availability) {
			a.restarted(wholeRedis, "r1", at(700), at(800))
			a.restarted(wholeRedis, "r2", at(600), at(1900))
		}, 2000, 0},
		{"a restart learnt earlier does not shorten a grace", func(a *availability) {
			a.lost()
			a.back(at(2000))
			a.restarted(wholeRedis, "r1", at(900), at(1000))
		}, 2400, 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAvailability(ttl, 100*time.Millisecond, 500*time.Millisecond) // pulse 300 ms, slow 250 ms
			tt.do(&a)
			if got := a.answeredFor(wholeRedis, ttl, at(tt.now)); got != tt.want {
				t.Errorf("answeredFor(%v, +%dms) = %v, want %v", ttl, tt.now, got, tt.want)
			}
		})
	}
}

func TestAvailabilityOutagesNumbered(t *testing.T) {
	a := newAvailability(time.Second, 100*time.Millisecond, 500*time.Millisecond)
	if a.outage() != 0 || !a.lost() || a.lost() || a.outage() != 1 {
		t.Fatalf("first outage: outage()=%d", a.outage())
	}
	a.back(time.Now())
	if a.down() || a.outage() != 0 || !a.lost() || a.outage() != 2 {
		t.Fatalf("second outage: outage()=%d", a.outage())
	}
}

// TestAvailabilityPerShard (issue 17, item 2): on a Redis Cluster each
// shard is judged by the calls to it. A failed call to one shard does not
// stop the others' judgement; the grace of the failed one counts from the
// first call to it answered again, not from the whole Redis's return.
func TestAvailabilityPerShard(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_790_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const a, b shard = 100, 9000
	tests := []struct {
		name    string
		do      func(av *availability)
		now     int // ms
		wantA   time.Duration
		wantB   time.Duration
		downA   bool
		quietB  bool
		outages uint64
	}{
		{"never disturbed", func(av *availability) {}, 0, 0, 0, false, true, 0},
		{"A fails: B judged, A not", func(av *availability) {
			av.answered(at(0), at(10), a, b)
			av.shardLost(a)
			av.lost()
		}, 3000, ttl, 0, true, true, 1},
		{"A answers again: its grace from then, B none", func(av *availability) {
			av.lost()
			av.shardLost(a)
			av.answered(at(0), at(10), b)
			av.answered(at(2000), at(2010), a)
		}, 2400, 610 * time.Millisecond, 0, false, true, 1},
		{"the whole Redis back: no grace for B", func(av *availability) {
			av.lost()
			av.shardLost(a)
			av.back(at(2000))
			av.answered(at(2000), at(2010), a, b)
		}, 2400, 610 * time.Millisecond, 0, false, true, 0},
		{"a slow call to A alone does not delay B", func(av *availability) {
			av.answered(at(1000), at(1600), a)
			av.answered(at(1500), at(1510), b)
		}, 1700, 900 * time.Millisecond, 0, false, false, 0},
		{"an unwatched step delays every shard, one first seen after it too (E26)", func(av *availability) {
			av.answered(at(0), at(10), a)
			av.unseen(at(100), at(1100))
			av.answered(at(1150), at(1160), a, b)
		}, 1200, 900 * time.Millisecond, 900 * time.Millisecond, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			av := newAvailability(ttl, 100*time.Millisecond, 500*time.Millisecond) // pulse 300 ms, slow 250 ms
			tt.do(&av)
			now := at(tt.now)
			if got := av.answeredFor(a, ttl, now); got != tt.wantA {
				t.Errorf("A: answeredFor = %v, want %v", got, tt.wantA)
			}
			if got := av.answeredFor(b, ttl, now); got != tt.wantB {
				t.Errorf("B: answeredFor = %v, want %v", got, tt.wantB)
			}
			if av.shardDown(a) != tt.downA || av.shardDown(b) {
				t.Errorf("shardDown: A %v B %v, want A %v B false", av.shardDown(a), av.shardDown(b), tt.downA)
			}
			if got := av.quietShard(b, now); got != tt.quietB {
				t.Errorf("B quiet = %v, want %v", got, tt.quietB)
			}
			if av.outage() != tt.outages {
				t.Errorf("outage() = %d, want %d", av.outage(), tt.outages)
			}
		})
	}
}

// TestKeySlot: the slots Redis's CLUSTER KEYSLOT gives.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":                    12739,
		"foo":                          12182,
		"{foo}.bar":                    12182,
		"vigil:hb:{worker:q:1}":        keySlot("worker:q:1"),
		"foo{}{bar}":                   keySlot("foo{}{bar}"),
		"{user1000}.following":         keySlot("user1000"),
		"vigil:component:{worker:q:1}": keySlot("vigil:hb:{worker:q:1}"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}
