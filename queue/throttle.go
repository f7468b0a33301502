package queue

import (
	"math"
	"time"
)

// Progress throttling (docs/design.md §6; the seeds' progress requirement).
const (
	// ProgressStep is the change, in points, that is always reported.
	ProgressStep = 1.0
	// ProgressInterval is how long after the last report a smaller change
	// is reported.
	ProgressInterval = 500 * time.Millisecond
)

// throttle decides which progress values of one job are reported: a value
// is reported when it moved by ProgressStep or more since the last report,
// or moved at all and ProgressInterval has passed since the last report, or
// reached 100 (once). Repeating the reported value reports nothing. The
// first report is measured from 0 at the job's start.
type throttle struct {
	last       float64   // last value offered, reported or not
	reported   float64   // last value reported
	reportedAt time.Time // when it was (the job's start before any)
}

func newThrottle(start time.Time) throttle { return throttle{reportedAt: start} }

// offer records pct at now and reports whether to emit it.
func (t *throttle) offer(pct float64, now time.Time) bool {
	t.last = pct
	emit := false
	switch {
	case pct == t.reported:
	case pct == 100:
		emit = true
	case math.Abs(pct-t.reported) >= ProgressStep:
		emit = true
	case now.Sub(t.reportedAt) >= ProgressInterval:
		emit = true
	}
	if emit {
		t.reported, t.reportedAt = pct, now
	}
	return emit
}

// clampPct brings pct into [0, 100]; NaN is refused.
func clampPct(pct float64) (float64, bool) {
	if math.IsNaN(pct) {
		return 0, false
	}
	return min(max(pct, 0), 100), true
}
