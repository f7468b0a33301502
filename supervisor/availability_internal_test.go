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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAvailability(ttl, 100*time.Millisecond, 500*time.Millisecond) // pulse 300 ms, slow 250 ms
			tt.do(&a)
			if got := a.answeredFor(ttl, at(tt.now)); got != tt.want {
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
