package queue

import (
	"math"
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // since the job's start
		pct  float64
		emit bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one point is always reported", []step{{0, 1, true}, {0, 2, true}, {0, 2.5, false}, {0, 3, true}}},
		{"smaller moves after 500ms", []step{{0, 0.5, false}, {499 * time.Millisecond, 0.6, false}, {500 * time.Millisecond, 0.7, true},
			{999 * time.Millisecond, 0.8, false}, {time.Second, 0.9, true}}},
		{"no move, no report, however late", []step{{0, 5, true}, {time.Hour, 5, false}}},
		{"100 is always reported, once", []step{{0, 99.5, true}, {0, 99.8, false}, {0, 100, true}, {time.Hour, 100, false}}},
		{"a drop of a point is reported", []step{{0, 50, true}, {0, 40, true}, {0, 39.5, false}}},
		{"the interval counts from the last report", []step{{0, 10, true}, {400 * time.Millisecond, 10.5, false},
			{500 * time.Millisecond, 10.6, true}, {900 * time.Millisecond, 10.7, false}, {time.Second, 10.8, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := newThrottle(t0)
			for i, s := range tt.steps {
				if got := th.offer(s.pct, t0.Add(s.at)); got != s.emit {
					t.Fatalf("step %d (%v at %s): emit %v, want %v", i, s.pct, s.at, got, s.emit)
				}
				if th.last != s.pct {
					t.Fatalf("step %d: last %v", i, th.last)
				}
			}
		})
	}
}

func TestClampPct(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{-3, 0}, {0, 0}, {42.5, 42.5}, {100, 100}, {250, 100}, {math.Inf(1), 100}} {
		if got, ok := clampPct(c.in); !ok || got != c.want {
			t.Errorf("clampPct(%v) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
	if _, ok := clampPct(math.NaN()); ok {
		t.Error("NaN accepted")
	}
}
