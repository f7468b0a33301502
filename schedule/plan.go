package schedule

import "time"

// plan is what a leader does now with one schedule's due ticks.
type plan struct {
	// fire are the ticks to enqueue, oldest first. Firing a tick decides
	// every earlier undecided tick as skipped, in the same script.
	fire []time.Time
	// skipTo, when set, is a tick to record as decided with nothing
	// enqueued (catch_up none, every due tick missed).
	skipTo time.Time
	// missed are the due ticks found late: all but the latest, and the
	// latest too when more than the grace late.
	missed int
	// firstMissed, lastMissed are the oldest and newest missed ticks.
	firstMissed, lastMissed time.Time
	// skipped are the ticks this plan decides as skipped.
	skipped int
	// capped: more ticks were due than could be walked (Spec.Due).
	capped bool
}

// makePlan decides, by policy, what to do with the ticks of spec in
// (from, now]: the latest fires if it is within grace; the others are
// missed, and policy says which of them fire (all: at most maxCatchUp of
// the most recent).
func makePlan(spec Spec, policy CatchUp, from, now time.Time, grace time.Duration, maxCatchUp int) plan {
	keep := 2 // the latest, and the one before it (the last missed when the latest is on time)
	if policy == CatchUpAll {
		keep = max(maxCatchUp, 1)
	}
	ticks, total, capped := spec.Due(from, now, max(keep, 2))
	if total == 0 || len(ticks) == 0 {
		return plan{}
	}
	latest := ticks[len(ticks)-1]
	onTime := now.Sub(latest) <= grace
	p := plan{capped: capped, missed: total}
	if onTime {
		p.missed--
	}
	if p.missed > 0 {
		p.firstMissed, p.lastMissed = spec.Next(from), latest
		if onTime {
			p.lastMissed = ticks[len(ticks)-2]
		}
	}
	if len(ticks) > keep {
		ticks = ticks[len(ticks)-keep:]
	}
	switch {
	case p.missed == 0:
		p.fire = ticks[len(ticks)-1:]
	case policy == CatchUpAll:
		p.fire = ticks
		p.skipped = total - len(ticks)
	case policy == CatchUpLast, onTime:
		// last: the latest due tick, late or not; none: the latest only
		// when it is on time.
		p.fire = []time.Time{latest}
		p.skipped = total - 1
	default: // none, nothing on time
		p.skipTo = latest
		p.skipped = total
	}
	return p
}
