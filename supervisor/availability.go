package supervisor

import (
	"slices"
	"time"
)

// availability is the monitor's judgement of whether Redis answers, made
// from the monitor's own calls (no separate probe while Redis answers). It
// decides when a heartbeat may be judged (docs/design.md §11): only if the
// shard that holds the heartbeat answered for the whole TTL before the
// deadline. A worker cannot beat while its shard does not answer, so a
// key that expired during an outage or a stall says nothing about the
// worker; the grace starts when that shard answers again
// (TestAvailability, TestAvailabilityPerShard).
//
// A shard did not answer:
//   - from a failed call to it until a call to it is answered again (an
//     outage: lost, then back);
//   - for the length of a call to it that answered, but only after more
//     than slow (a stall: a paused server, a network that holds the
//     bytes); no call fails then, yet the workers could not beat either
//     (TestRedisStallLongerThanTTLKillsNothing).
//
// A stall is seen only by a call that overlaps it, so the monitor makes
// one to every shard that holds a running worker's heartbeat at least
// every pulse (the tick's lease renewal, a heartbeat read, else the
// pulse's own: Supervisor.pulse). Only a stall or outage longer than
// TTL − heartbeat interval can cost a live worker its key; with pulse =
// (TTL − interval)/3 and slow ≤ pulse, the call overlapping such a stall
// lasts more than 2·pulse and is seen, and a call during such an outage
// fails. That holds only while the monitor is free to make the pulse: a
// call of a step of the tick keeps it from doing so while it waits, and
// one longer than slow counts as a stall of every shard (unseen; the
// calls are timed one by one, stepCalls;
// TestTickHeldWhileWorkersCannotBeatKillsNothing).
//
// Shards. A single Redis (plain or behind Sentinel) is one shard,
// wholeRedis, judged as one thing: the same value as the whole Redis
// below. On a Redis Cluster a shard is known by the hash slot of the
// worker's keys (they share one hash tag): a slot is served by one master
// at a time, and keeps its identity through a failover (its replica takes
// the same slots), which a node's address would not. Each slot's value is
// fed by the monitor's calls that touch it (heartbeat reads, lease
// renewals, the rewrite after an outage, the pulse, timed per node). While
// one shard fails over, the workers of the others are judged as usual: a
// hung one is killed within its TTL, not a failover plus a TTL later
// (failover's TestClusterShardFailoverJudgesOthers, `make test-failover`).
//
// The whole Redis (down, outage, answeringSince) is what the rest of the
// monitor goes by: a failed call to any shard is an outage of the control
// plane (no tick, no lease moved, records kept in memory) until every
// shard answers again (Supervisor.probeRedis). Nothing is moved for a
// failover shorter than the lease, and no host is judged lost until Redis
// answered for a tick after it.
//
// Owned by the monitor goroutine; no lock.
type availability struct {
	pulse, slow time.Duration
	isDown      bool
	outages     uint64    // outages so far (the current one while down)
	since       time.Time // when Redis last began answering (zero: always has)
	last        time.Time // when the last timed call was answered
	// blind is the end of the last window in which the monitor could make
	// no call for longer than slow (see unseen): a shard first seen after
	// it is taken to answer from there, not always.
	blind time.Time
	// slots: a Redis Cluster's shards, by hash slot (see shardOf); absent
	// until a call to it is seen (it answered always, as far as we know).
	slots map[shard]*span
	// runs: the run_ids of the servers of each shard whose restart gave a
	// grace (restarted), the last keptRuns of them.
	runs map[shard][]string
	// graced: when each shard's last restart grace was given (restarted):
	// a server that started before it gives no other.
	graced map[shard]time.Time
}

// keptRuns is how many runs of a shard's servers restarted remembers: a
// run's start is read to a second (serverAge; to two without
// server_time_usec, Redis before 6.2), so the run given a grace that soon
// after its start could seem to have started after it.
const keptRuns = 4

// shard names where a worker's keys live: wholeRedis, or on a Redis
// Cluster the hash slot of its keys.
type shard int

// wholeRedis is the one shard of a Redis that is not a Cluster.
const wholeRedis shard = -1

// span is one cluster shard's value: down since a call to it failed,
// answering since when, last answered when.
type span struct {
	isDown      bool
	since, last time.Time
}

// newAvailability judges heartbeats of TTL ttl beaten every interval, by
// calls bounded by opTimeout.
func newAvailability(ttl, interval, opTimeout time.Duration) availability {
	pulse := max((ttl-interval)/3, time.Millisecond)
	return availability{pulse: pulse, slow: min(pulse, opTimeout/2), slots: map[shard]*span{}, runs: map[shard][]string{},
		graced: map[shard]time.Time{}}
}

// quiet reports whether no timed call was answered for a pulse before now:
// the monitor should make one.
func (a *availability) quiet(now time.Time) bool { return now.Sub(a.last) >= a.pulse }

// quietShard reports whether no timed call to cluster shard sh was
// answered for a pulse before now.
func (a *availability) quietShard(sh shard, now time.Time) bool {
	if sh == wholeRedis {
		return a.quiet(now)
	}
	sp := a.slots[sh]
	return sp == nil || sp.isDown || now.Sub(sp.last) >= a.pulse
}

// down reports whether Redis is unreachable now (a call failed, and no
// probe has been answered since).
func (a *availability) down() bool { return a.isDown }

// shardDown reports whether a call to shard sh failed and none to it has
// been answered since.
func (a *availability) shardDown(sh shard) bool {
	if sh == wholeRedis {
		return a.isDown
	}
	sp := a.slots[sh]
	return sp != nil && sp.isDown
}

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

// shardLost records a failed call to cluster shard sh. The call failing
// is an outage of the whole Redis too, which lost records (for
// wholeRedis, only lost).
func (a *availability) shardLost(sh shard) {
	if sh != wholeRedis {
		a.span(sh).isDown = true
	}
}

// back records that Redis answers again at at (a probe was answered).
func (a *availability) back(at time.Time) {
	a.isDown = false
	a.since = latest(a.since, at)
}

// answered records calls that got their answers, sent at start and
// answered at end, to the cluster shards shs (none: calls about the whole
// Redis, or a Redis that is not a Cluster). A call slower than a.slow
// means Redis (those shards) did not answer meanwhile: it reports true and
// the grace counts from end. A shard that was down is back at end: its
// grace counts from there.
func (a *availability) answered(start, end time.Time, shs ...shard) bool {
	a.last = latest(a.last, end)
	slow := end.Sub(start) > a.slow
	if slow {
		a.since = latest(a.since, end)
	}
	for _, sh := range shs {
		if sh == wholeRedis {
			continue
		}
		sp := a.span(sh)
		sp.last = latest(sp.last, end)
		if sp.isDown || slow {
			sp.isDown = false
			sp.since = latest(sp.since, end)
		}
	}
	return slow
}

// unseen records that the monitor waited on Redis from start to end in a
// call of a step of the tick (its reads and writes after its renewal,
// timed one by one: stepCalls). Meanwhile it made no other call, the pulse
// included: a stall of any shard in that window would have gone unseen,
// and a worker's key may have expired for it (two Redis pauses back to
// back, the tick held by the second, the heartbeat read just after it
// answered at once: TestTickHeldWhileWorkersCannotBeatKillsNothing).
// Longer than slow, the window counts as a stall of every shard: it
// reports true, and no heartbeat is judged until each shard has answered
// for a TTL after end.
func (a *availability) unseen(start, end time.Time) bool {
	if end.Sub(start) <= a.slow {
		return false
	}
	a.since = latest(a.since, end)
	a.blind = latest(a.blind, end)
	for _, sp := range a.slots {
		sp.since = latest(sp.since, end)
	}
	return true
}

// restarted records that the server holding shard sh, known by its
// run_id run and started at the latest at started, may have started after
// the last beat of a worker whose key is now gone (restartUnseen): a
// restart between the monitor's calls, an outage it did not see, in which
// no worker could beat. The shard answers from now on, learnt at now (the
// call that found the key gone was answered, so the server had loaded its
// data by then).
//
// Once per restart: it reports false, and changes nothing, for a server
// that started before the shard's last grace (or a run already counted,
// one of the shard's last keptRuns: its start is known to a second), so
// that a hung worker is judged as usual a TTL later, however many servers
// answer for the shard in turn (a proxy over several, a master that moves
// back and forth: remembering only the last keptRuns runs, five in turn
// would give the grace at every judgement; TestRestartedRunsInTurn).
// Every restart after the last grace gives one: a Redis that restarts
// every TTL spares a hang for as long as it does. For wholeRedis it is the
// whole Redis's return: a host is judged lost only a tick after it, as
// after any outage.
func (a *availability) restarted(sh shard, run string, started, now time.Time) bool {
	runs := a.runs[sh]
	if slices.Contains(runs, run) || !started.After(a.graced[sh]) {
		return false
	}
	if len(runs) == keptRuns {
		runs = slices.Delete(runs, 0, 1)
	}
	a.runs[sh] = append(runs, run)
	a.graced[sh] = now
	if sh == wholeRedis {
		a.since = latest(a.since, now)
		return true
	}
	sp := a.span(sh)
	sp.since = latest(sp.since, now)
	return true
}

// answeredFor reports how long, after now, shard sh must still answer
// before it will have answered for a whole d: 0 when it already has (a
// heartbeat on it may be judged).
func (a *availability) answeredFor(sh shard, d time.Duration, now time.Time) time.Duration {
	if sh == wholeRedis {
		if a.isDown {
			return d
		}
		return max(0, a.since.Add(d).Sub(now))
	}
	sp := a.slots[sh]
	switch {
	case sp == nil:
		return max(0, a.blind.Add(d).Sub(now))
	case sp.isDown:
		return d
	}
	return max(0, sp.since.Add(d).Sub(now))
}

// answeringSince is when Redis last began answering (zero: it always has).
func (a *availability) answeringSince() time.Time { return a.since }

// shardAnsweringSince is when shard sh last began answering (zero: it
// always has).
func (a *availability) shardAnsweringSince(sh shard) time.Time {
	if sh == wholeRedis {
		return a.since
	}
	if sp := a.slots[sh]; sp != nil {
		return sp.since
	}
	return a.blind
}

func (a *availability) span(sh shard) *span {
	sp := a.slots[sh]
	if sp == nil {
		sp = &span{since: a.blind}
		a.slots[sh] = sp
	}
	return sp
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
