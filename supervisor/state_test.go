package supervisor

import (
	"slices"
	"testing"
)

var allStates = []workerState{stIdle, stBackoff, stRunning, stStopping, stReleasing, stFenced, stWaitingOld, stWaitingStart, stGone}

// Each (event, state) pair has at most one rule, so that "is this event
// legal here, and where may it lead" has one answer.
func TestWorkerRulesUnambiguous(t *testing.T) {
	for ev := evAdopt; ev <= evOpRemove; ev++ {
		for _, st := range allStates {
			n := 0
			for _, r := range workerRules {
				if r.ev == ev && slices.Contains(r.from, st) {
					n++
				}
			}
			if n > 1 {
				t.Errorf("%s in %s: %d rules", ev, st, n)
			}
		}
	}
}

// The legalities the fault invariants of issue 12 rest on.
func TestWorkerRulesHoldTheInvariants(t *testing.T) {
	tests := []struct {
		ev    event
		st    workerState
		legal bool
		why   string
	}{
		{evFence, stFenced, false, "fence once: the SIGKILL is never postponed (defect 3)"},
		{evFence, stRunning, true, "a lost lease stops a running worker"},
		{evOpRestart, stReleasing, false, "no restart while the slot leaves (defect 2)"},
		{evOpRestart, stFenced, false, "a fenced worker is not ours: the action goes to the holder (defect 1)"},
		{evOpStop, stFenced, false, "a fenced host writes nothing for the slot (defect 1)"},
		{evOpReset, stFenced, false, "a fenced host writes nothing for the slot (defect 1)"},
		{evOpRestart, stWaitingOld, false, "never two processes for one slot"},
		{evRelease, stWaitingOld, false, "the slot is not given away while an old process lives"},
		{evOpRestart, stWaitingStart, false, "never two processes for one slot: a start in flight may run (E36)"},
		{evOpReset, stWaitingStart, false, "never two processes for one slot: a reset may start (E36)"},
		{evBackoffDone, stWaitingStart, false, "no backoff timer starts it: only the wait's own (E36)"},
		{evShutdown, stWaitingStart, true, "a shutdown ends the wait (invariant 6); the record makes the next holder wait"},
		{evShutdown, stFenced, true, "shutdown leaves a fenced worker to its kill (and writes nothing)"},
		{evRewrite, stFenced, false, "a fenced worker's record is the new owner's"},
		{evOpReset, stRunning, false, "reset needs the worker down"},
		{evCheck, stStopping, false, "a stopping worker is not judged by heartbeat"},
	}
	for _, tt := range tests {
		if got := legal(tt.ev, tt.st); got != tt.legal {
			t.Errorf("%s in %s: legal %v, want %v: %s", tt.ev, tt.st, got, tt.legal, tt.why)
		}
	}
	for ev := evAdopt; ev <= evOpRemove; ev++ {
		if legal(ev, stGone) {
			t.Errorf("%s is legal for a forgotten worker", ev)
		}
	}
	// Only an exit, a release, a fence or a removal (of an idle worker:
	// no process) forgets a worker.
	for _, r := range workerRules {
		if r.ev == evOpRemove && !slices.Equal(r.from, states(stIdle)) {
			t.Errorf("%s from %v: only an idle worker (no process) may be removed", r.ev, r.from)
		}
		if slices.Contains(r.to, stGone) && r.ev != evExit && r.ev != evRelease && r.ev != evFence && r.ev != evOpRemove {
			t.Errorf("%s may forget a worker", r.ev)
		}
	}
}

func TestPoolSizes(t *testing.T) {
	pools := []Pool{{Queue: "a", Workers: 2}, {Queue: "b", Workers: 3}, {Queue: "c", Workers: 1}}
	tests := []struct {
		name    string
		raw     map[string]string
		want    map[string]int
		refused []string
	}{
		{"configured", map[string]string{}, map[string]int{"a": 2, "b": 3, "c": 1}, nil},
		{"set in Redis", map[string]string{"pool:a": "5", "pool:b": "0"}, map[string]int{"a": 5, "b": 0, "c": 1}, nil},
		{"capped at max_pool_size", map[string]string{"pool:a": "1000000"}, map[string]int{"a": 10, "b": 3, "c": 1}, []string{"a"}},
		{"garbage refused", map[string]string{"pool:a": "x", "pool:b": "-1", "pool:c": "10"}, map[string]int{"a": 2, "b": 3, "c": 10}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		got, refused := poolSizes(pools, tt.raw, 10)
		for q, n := range tt.want {
			if got[q] != n {
				t.Errorf("%s: %s = %d, want %d", tt.name, q, got[q], n)
			}
		}
		var qs []string
		for _, r := range refused {
			qs = append(qs, r.queue)
		}
		if !slices.Equal(qs, tt.refused) {
			t.Errorf("%s: refused %v, want %v", tt.name, qs, tt.refused)
		}
	}
}
