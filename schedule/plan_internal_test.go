package schedule

import (
	"testing"
	"time"
)

func TestMakePlan(t *testing.T) {
	every, _ := ParseSpec("@every 1s", false)
	daily, _ := ParseSpec("0 2 * * *", false)
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	grace := time.Minute
	tests := []struct {
		name        string
		spec        Spec
		policy      CatchUp
		from, now   time.Time
		max         int
		fire        []time.Time
		skipTo      time.Time
		missed      int
		skipped     int
		first, last time.Time
	}{
		{"nothing due", every, CatchUpLast, sec(5), sec(5).Add(999 * time.Millisecond), 0, nil, time.Time{}, 0, 0, time.Time{}, time.Time{}},
		{"one tick on time", every, CatchUpNone, sec(5), sec(6).Add(3 * time.Millisecond), 0, []time.Time{sec(6)}, time.Time{}, 0, 0, time.Time{}, time.Time{}},
		{"late but within grace", daily, CatchUpNone, t0, t0.Add(2*time.Hour + 30*time.Second), 0, []time.Time{t0.Add(2 * time.Hour)}, time.Time{}, 0, 0, time.Time{}, time.Time{}},
		// A failover of 15 s on a 1 s schedule: 14 missed, the latest on time.
		{"none after failover", every, CatchUpNone, sec(5), sec(20).Add(10 * time.Millisecond), 0, []time.Time{sec(20)}, time.Time{}, 14, 14, sec(6), sec(19)},
		{"last after failover", every, CatchUpLast, sec(5), sec(20).Add(10 * time.Millisecond), 0, []time.Time{sec(20)}, time.Time{}, 14, 14, sec(6), sec(19)},
		{"all after failover", every, CatchUpAll, sec(5), sec(8).Add(10 * time.Millisecond), 10, []time.Time{sec(6), sec(7), sec(8)}, time.Time{}, 2, 0, sec(6), sec(7)},
		{"all, capped", every, CatchUpAll, sec(5), sec(20).Add(10 * time.Millisecond), 4, []time.Time{sec(17), sec(18), sec(19), sec(20)}, time.Time{}, 14, 11, sec(6), sec(19)},
		// A daily tick missed by three hours (the leader was away).
		{"none, daily tick 3 h late", daily, CatchUpNone, t0, t0.Add(5 * time.Hour), 0, nil, t0.Add(2 * time.Hour), 1, 1, t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		{"last, daily tick 3 h late", daily, CatchUpLast, t0, t0.Add(5 * time.Hour), 0, []time.Time{t0.Add(2 * time.Hour)}, time.Time{}, 1, 0, t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		{"all, daily ticks of 3 days", daily, CatchUpAll, t0, t0.Add(50 * time.Hour), 10, []time.Time{t0.Add(2 * time.Hour), t0.Add(26 * time.Hour), t0.Add(50 * time.Hour)}, time.Time{}, 2, 0, t0.Add(2 * time.Hour), t0.Add(26 * time.Hour)},
		{"last, daily ticks of 3 days, none on time", daily, CatchUpLast, t0, t0.Add(51 * time.Hour), 0, []time.Time{t0.Add(50 * time.Hour)}, time.Time{}, 3, 2, t0.Add(2 * time.Hour), t0.Add(50 * time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := makePlan(tt.spec, tt.policy, tt.from, tt.now, grace, tt.max)
			if !sameTimes(p.fire, tt.fire) || !p.skipTo.Equal(tt.skipTo) || p.missed != tt.missed || p.skipped != tt.skipped ||
				!p.firstMissed.Equal(tt.first) || !p.lastMissed.Equal(tt.last) {
				t.Errorf("plan = fire %v skipTo %v missed %d skipped %d first %v last %v\nwant fire %v skipTo %v missed %d skipped %d first %v last %v",
					p.fire, p.skipTo, p.missed, p.skipped, p.firstMissed, p.lastMissed, tt.fire, tt.skipTo, tt.missed, tt.skipped, tt.first, tt.last)
			}
		})
	}
}

func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
