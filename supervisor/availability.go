package supervisor

import "time"

// availability is the monitor's judgement of whether Redis answers, made
// from the monitor's own calls (no separate probe while Redis answers). It
// decides when a heartbeat may be judged (DESIGN.md §11, issue 17 item 2):
// only if Redis answered for the whole TTL before the deadline. A worker
// cannot beat while Redis does not answer, so a key that expired during an
// outage or a stall says nothing about the worker; the grace starts when
// Redis answers again.
//
// Redis did not answer:
//   - from a failed call until a probe is answered again (an outage:
//     lost, then back);
//   - for the length of a call that answered, but only after more than
//     slow (a stall: a paused server, a network that holds the bytes); no
//     call fails then, yet the workers could not beat either (fault
//     explorer E14).
//
// A stall is seen only by a call that overlaps it, so the monitor makes
// one at least every pulse while it judges heartbeats (the tick's lease
// renewal, else a PING: Supervisor.pulse). Only a stall longer than
// TTL − heartbeat interval can cost a live worker its key; with pulse =
// (TTL − interval)/3 and slow ≤ pulse, the call overlapping such a stall
// lasts more than 2·pulse and is seen.
//
// It judges Redis as one thing. On a Redis Cluster each shard would get a
// value of its own (keyed by the node that served the call), fed by the
// calls to that shard, and a heartbeat would be judged by the shard that
// holds its key: the API below stays as it is.
//
// Owned by the monitor goroutine; no lock.
type availability struct {
	pulse, slow time.Duration
	isDown      bool
	outages     uint64    // outages so far (the current one while down)
	since       time.Time // when Redis last began answering (zero: always has)
	last        time.Time // when the last timed call was answered
}

// newAvailability judges heartbeats of TTL ttl beaten every interval, by
// calls bounded by opTimeout.
func newAvailability(ttl, interval, opTimeout time.Duration) availability {
	pulse := max((ttl-interval)/3, time.Millisecond)
	return availability{pulse: pulse, slow: min(pulse, opTimeout/2)}
}

// quiet reports whether no timed call was answered for a pulse before now:
// the monitor should make one.
func (a *availability) quiet(now time.Time) bool { return now.Sub(a.last) >= a.pulse }

// down reports whether Redis is unreachable now (a call failed, and no
// probe has been answered since).
func (a *availability) down() bool { return a.isDown }

// outage numbers the current outage, 0 while Redis answers (a process
// started during an outage is marked with it).
func (a *availability) outage() uint64 {
	if !a.isDown {
		return 0
	}
	return a.outages
}

// lost records a failed call. It reports whether Redis was answering
// until then (the outage begins: start probing).
func (a *availability) lost() bool {
	if a.isDown {
		return false
	}
	a.isDown = true
	a.outages++
	return true
}

// back records that Redis answers again at at (a probe was answered).
func (a *availability) back(at time.Time) {
	a.isDown = false
	a.since = latest(a.since, at)
}

// answered records a call that got its answer, sent at start and answered
// at end. A call slower than a.slow means Redis did not answer meanwhile:
// it reports true and the grace counts from end.
func (a *availability) answered(start, end time.Time) bool {
	a.last = latest(a.last, end)
	if end.Sub(start) <= a.slow {
		return false
	}
	a.since = latest(a.since, end)
	return true
}

// answeredFor reports how long, after now, Redis must still answer before
// it will have answered for a whole d: 0 when it already has (a heartbeat
// may be judged).
func (a *availability) answeredFor(d time.Duration, now time.Time) time.Duration {
	if a.isDown {
		return d
	}
	return max(0, a.since.Add(d).Sub(now))
}

// answeringSince is when Redis last began answering (zero: it always has).
func (a *availability) answeringSince() time.Time { return a.since }

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
