package supervisor

import (
	"fmt"
	"log/slog"
	"slices"
)

// workerState is where one worker stands on this host: the monitor's own
// view, one value per worker, distinct from the record's health.Status in
// Redis (which this host writes only while it holds the slot). Every event
// handler starts by asking the table below whether its event is legal in
// the worker's state; an illegal one is logged and refused, never
// half-applied.
//
// The table is where the fault invariants (RELIABILITY.md, "Core state
// machine") are decided: no restart while a slot is released or fenced,
// and no release while an earlier process lives (never two processes for
// one slot); a fenced worker is fenced once and never written for (no
// process outlives its supervisor's hold on the slot, and the record names
// the lease holder); every operator action in every state has an answer.
// TestWorkerRulesHoldTheInvariants holds those legalities, and
// TestWorkerRulesUnambiguous that each (event, state) pair has one rule.
type workerState uint8

const (
	// stIdle: no process and nothing scheduled. The record is stopped
	// (held or not), failed, or crashed while the host shuts down.
	stIdle workerState = iota
	// stBackoff: crashed, no process, exactly one restart timer armed.
	// An exit seen while Redis was away waits here for its verdict
	// (worker.unjudged): the timer judges it once Redis answers and the
	// lease is renewed; a fence, release or shutdown drops it uncounted.
	stBackoff
	// stRunning: a process the monitor started and judges by heartbeat
	// (record starting or healthy).
	stRunning
	// stStopping: the process was asked to stop (operator stop or restart,
	// host shutdown): SIGTERM sent, SIGKILL armed at stop_timeout.
	stStopping
	// stReleasing: the process is stopping to give the slot to another
	// host (drain, pool shrink, rebalance). On its exit the stop is
	// recorded, the worker forgotten and the lease released. The slot is
	// leaving: operator actions on it are refused.
	stReleasing
	// stFenced: the slot's lease is another host's. SIGTERM was sent and
	// SIGKILL armed once; nothing is written for the slot again; on exit
	// the worker is forgotten. Actions go to the new holder.
	stFenced
	// stWaitingOld: adopted while an earlier supervisor's process for the
	// slot still lives (this host's earlier instance, or a lost host's
	// process on this machine, which is stopped); started once it is gone.
	stWaitingOld
	// stWaitingStart: adopted over a start in flight whose process no pid
	// names (another host's, or this host's earlier instance's not found
	// on this machine): that process may run, and only its own host can
	// stop it (TestTakeoverWaitsForAStartInFlight). No process here; the
	// record is left as it was (starting, that host's, no pid), so that
	// whoever holds the slot next waits too; one timer (timerStartGone)
	// starts it once that host has had the time to stop what it started.
	// Operator actions are refused (they would start a second process); a
	// release or a shutdown ends the wait without a start and leaves the
	// record to the next holder.
	stWaitingStart
	// stGone: forgotten, dropped from the monitor's map (terminal). A
	// callback still holding the worker sees it here.
	stGone
)

var stateNames = [...]string{"idle", "backoff", "running", "stopping", "releasing", "fenced", "waiting_old", "waiting_start", "gone"}

func (s workerState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// event is what happens to a worker.
type event uint8

const (
	evAdopt       event = iota // this host claimed the slot: take over its record
	evExit                     // the process exited (reaped)
	evCheck                    // heartbeat deadline or start timeout
	evBackoffDone              // the restart timer fell due
	evStopTimeout              // stop_timeout passed: SIGKILL
	evOldGone                  // an earlier supervisor's process is gone
	evStartGone                // a start in flight whose process no pid names had the time to be stopped
	evOpRestart                // operator restart (or its queued half, once the old process stopped)
	evOpStop                   // operator stop (held)
	evOpReset                  // operator reset
	evShutdown                 // host shutdown
	evRelease                  // tick: the slot must go (drain, shrink, rebalance)
	evFence                    // the slot's lease is another host's
	evRewrite                  // Redis is back, or lost its data: write the record again
	evOpRemove                 // operator removes a stopped slot beyond its pool (its keys go)
)

var eventNames = [...]string{"adopt", "exit", "check", "backoff_done", "stop_timeout", "old_gone", "start_gone",
	"operator_restart", "operator_stop", "operator_reset", "shutdown", "release", "fence", "rewrite", "operator_remove"}

func (e event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", int(e))
}

type workerRule struct {
	ev   event
	from []workerState
	to   []workerState // where the handler may leave the worker; from itself only when listed
}

func states(s ...workerState) []workerState { return s }

// workerRules is the worker state machine (RELIABILITY.md, "Core state
// machine"). An event is legal in a state only if a rule lists it; the
// handler may then leave the worker only in one of the rule's states.
var workerRules = []workerRule{
	{evAdopt, states(stIdle), states(stRunning, stIdle, stBackoff, stWaitingOld, stWaitingStart)},
	{evExit, states(stRunning), states(stBackoff, stIdle)},  // a crash: restart timer, or failed, or shutting down
	{evExit, states(stStopping), states(stIdle)},            // stopped; a queued restart starts it as its own event
	{evExit, states(stReleasing, stFenced), states(stGone)}, // the slot is another host's now
	{evCheck, states(stRunning), states(stRunning)},         // judged: re-armed, or killed (its exit follows)
	{evBackoffDone, states(stBackoff), states(stRunning, stBackoff, stIdle)},
	{evStopTimeout, states(stStopping), states(stStopping)},   // SIGKILL
	{evStopTimeout, states(stReleasing), states(stReleasing)}, // SIGKILL
	{evStopTimeout, states(stFenced), states(stFenced)},       // SIGKILL
	{evOldGone, states(stWaitingOld), states(stRunning, stBackoff, stIdle)},
	{evStartGone, states(stWaitingStart), states(stRunning, stBackoff, stIdle)},
	{evOpRestart, states(stRunning, stStopping), states(stStopping)}, // stop first; the start is queued
	{evOpRestart, states(stIdle, stBackoff), states(stRunning, stBackoff, stIdle)},
	{evOpStop, states(stRunning, stStopping), states(stStopping)},
	{evOpStop, states(stIdle, stBackoff), states(stIdle)},
	{evOpReset, states(stIdle, stBackoff), states(stIdle, stRunning, stBackoff)},
	{evShutdown, states(stRunning, stStopping), states(stStopping)},
	{evShutdown, states(stBackoff, stIdle, stWaitingStart), states(stIdle)},                                // a wait for a start in flight ends: the record makes the next holder wait
	{evShutdown, states(stReleasing, stFenced, stWaitingOld), states(stReleasing, stFenced, stWaitingOld)}, // already on their way
	{evRelease, states(stRunning, stStopping), states(stReleasing)},                                        // a stop in flight goes on and ends the release
	{evRelease, states(stIdle, stBackoff, stWaitingStart), states(stGone)},                                 // the record makes the next holder wait
	{evFence, states(stRunning, stStopping, stReleasing), states(stFenced)},                                // once: a fenced worker is not fenced again
	{evFence, states(stIdle, stBackoff, stWaitingOld, stWaitingStart), states(stGone)},
	{evRewrite, states(stIdle, stBackoff, stRunning, stStopping, stReleasing, stWaitingOld, stWaitingStart),
		states(stIdle, stBackoff, stRunning, stStopping, stReleasing, stWaitingOld, stWaitingStart)}, // nothing moves
	{evOpRemove, states(stIdle), states(stGone, stIdle)}, // removed, or refused by Redis (kept)
}

func rule(ev event, from workerState) *workerRule {
	for i := range workerRules {
		if r := &workerRules[i]; r.ev == ev && slices.Contains(r.from, from) {
			return r
		}
	}
	return nil
}

// legal reports whether ev may be handled for a worker in st.
func legal(ev event, st workerState) bool { return rule(ev, st) != nil }

// step is one event being handled for one worker.
type step struct {
	s    *Supervisor
	w    *worker
	ev   event
	from workerState
	// verdict: the step judges this exit, already written as crashed
	// while Redis was away (judgeExit): writing crashed again is no
	// transition, and the crash is the policy's as of its own time.
	verdict *exitSeen
}

// begin starts handling ev for w. An event w's state does not allow is
// logged and refused (ok is false): the caller applies nothing.
func (s *Supervisor) begin(w *worker, ev event) (step, bool) {
	if !legal(ev, w.state) {
		s.logw(w).Warn("event refused in this state", slog.String("event", ev.String()), slog.String("state", w.state.String()))
		return step{}, false
	}
	return step{s: s, w: w, ev: ev, from: w.state}, true
}

// to moves the worker to st. A move the table does not allow for the
// event is a bug in the handler: it is logged and counted (tests fail on
// any), and applied, since the handler's side effects are done.
func (t step) to(st workerState) {
	if st == t.w.state {
		return
	}
	if r := rule(t.ev, t.from); r == nil || !slices.Contains(r.to, st) {
		t.s.illegal.Add(1)
		t.s.logw(t.w).Error("illegal worker transition", slog.String("event", t.ev.String()),
			slog.String("from", t.from.String()), slog.String("state", t.w.state.String()), slog.String("to", st.String()))
	}
	t.w.state = st
}
