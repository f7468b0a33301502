package health_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

// designState is a from-state of docs/design.md §4's table: a status, and for
// stopped whether it is held.
type designState struct {
	status health.Status
	held   bool
}

func (s designState) String() string {
	switch {
	case s.status == health.StatusNone:
		return "none"
	case s.held:
		return string(s.status) + "+held"
	}
	return string(s.status)
}

var (
	none        = designState{status: health.StatusNone}
	starting    = designState{status: health.StatusStarting}
	healthy     = designState{status: health.StatusHealthy}
	recovering  = designState{status: health.StatusRecovering}
	stopping    = designState{status: health.StatusStopping}
	stopped     = designState{status: health.StatusStopped}
	heldStopped = designState{status: health.StatusStopped, held: true}
	crashed     = designState{status: health.StatusCrashed}
	failed      = designState{status: health.StatusFailed}
)

var (
	monitor  = health.ActorMonitor
	operator = health.ActorOperator
	takeover = health.ActorTakeover
)

// designTable is docs/design.md §4's status machine, one line per row of the
// spec, written out from the text (not from the package's own table). The
// "who" of each row: the supervisor acting on its own (monitor), an operator
// through the API, or a host taking over a lost host's slot.
var designTable = []struct {
	from []designState
	to   health.Status
	who  []health.Actor
	when string
}{
	{[]designState{none, stopped, crashed}, health.StatusStarting, []health.Actor{monitor, operator}, "spawn, restart after backoff, operator restart"},
	{[]designState{failed, heldStopped}, health.StatusStarting, []health.Actor{operator}, "operator restart only"},
	{[]designState{starting}, health.StatusHealthy, []health.Actor{monitor}, "first valid heartbeat"},
	{[]designState{starting, healthy, recovering}, health.StatusRecovering, []health.Actor{monitor}, "a heartbeat with recover_for (issue 20)"},
	{[]designState{recovering}, health.StatusHealthy, []health.Actor{monitor}, "an ordinary heartbeat ends the window"},
	{[]designState{starting, healthy, recovering}, health.StatusStopping, []health.Actor{monitor, operator}, "stop requested (operator, shutdown, drain, pool shrink)"},
	{[]designState{stopping}, health.StatusStopped, []health.Actor{monitor}, "process exited (any code)"},
	{[]designState{starting, healthy, recovering}, health.StatusCrashed, []health.Actor{monitor}, "unexpected exit, hang, bad heartbeat, start timeout, reconcile"},
	{[]designState{stopping}, health.StatusStopped, []health.Actor{monitor}, "reconcile finds it with no process"},
	{[]designState{crashed}, health.StatusFailed, []health.Actor{monitor}, "policy limit reached"},
	{[]designState{crashed}, health.StatusStopped, []health.Actor{monitor, operator}, "stop requested during backoff, or host shutdown"},
	{[]designState{starting, healthy, recovering, stopping, crashed}, health.StatusStarting, []health.Actor{takeover}, "another host takes the slot over"},
	// "failed, crashed, stopped → stopped + held": a held stopped one may be
	// reset again.
	{[]designState{failed, crashed, stopped, heldStopped}, health.StatusStopped, []health.Actor{operator}, "operator reset"},
}

type transition struct {
	from  designState
	to    health.Status
	actor health.Actor
}

func designAllowed() map[transition]string {
	out := map[transition]string{}
	for _, row := range designTable {
		for _, f := range row.from {
			for _, a := range row.who {
				out[transition{f, row.to, a}] = row.when
			}
		}
	}
	return out
}

// expectedAllowed applies designTable. Held is a property of stopped
// components only: for any other status the flag changes nothing.
func expectedAllowed(from health.Status, held bool, to health.Status, actor health.Actor) (bool, string) {
	allowed := designAllowed()
	ds := designState{status: from, held: held && from == health.StatusStopped}
	why, ok := allowed[transition{ds, to, actor}]
	return ok, why
}

func TestAllowedMatchesDesign(t *testing.T) {
	statuses := []health.Status{
		health.StatusNone, health.StatusStarting, health.StatusHealthy, health.StatusRecovering, health.StatusStopping,
		health.StatusStopped, health.StatusCrashed, health.StatusFailed,
		"bogus", // never stored by Vigil; nothing may lead to or from it
	}
	actors := []health.Actor{monitor, operator, takeover, health.Actor(99)}
	allowedSeen := 0
	for _, from := range statuses {
		for _, held := range []bool{false, true} {
			for _, to := range statuses {
				for _, actor := range actors {
					want, why := expectedAllowed(from, held, to, actor)
					if want {
						allowedSeen++
					}
					got := health.Allowed(from, held, to, actor)
					if got != want {
						t.Errorf("Allowed(from=%q, held=%v, to=%q, %s) = %v, want %v %s",
							from, held, to, actor, got, want, why)
					}
				}
			}
		}
	}
	if allowedSeen == 0 {
		t.Fatal("the expected table allows nothing")
	}
}

// Guards the expected table against a typo: counted by hand from §4,
// 26 distinct (from, to, actor) triples are allowed (row 7 repeats row 5,
// and the operator's crashed → stopped is in rows 9 and 11), and the
// recovering windows of issue 20 add 8: three into recovering, one out of
// it to healthy, to stopping by monitor or operator, to crashed, and a
// takeover.
func TestDesignTableSize(t *testing.T) {
	if n := len(designAllowed()); n != 34 {
		t.Errorf("expected table allows %d triples, want 34", n)
	}
}

// A few transitions the design names in words, spelled out so that a
// wrong expected table would show up here too.
func TestAllowedSpotChecks(t *testing.T) {
	tests := []struct {
		from  health.Status
		held  bool
		to    health.Status
		actor health.Actor
		want  bool
	}{
		{health.StatusNone, false, health.StatusStarting, monitor, true},
		{health.StatusStopped, false, health.StatusStarting, monitor, true},
		{health.StatusStopped, true, health.StatusStarting, monitor, false}, // held: operator only
		{health.StatusStopped, true, health.StatusStarting, operator, true},
		{health.StatusFailed, false, health.StatusStarting, monitor, false},
		{health.StatusFailed, false, health.StatusStarting, operator, true},
		{health.StatusFailed, false, health.StatusStarting, takeover, false},
		{health.StatusStarting, false, health.StatusHealthy, operator, false},
		{health.StatusHealthy, false, health.StatusStarting, monitor, false}, // only a takeover restarts a live one
		{health.StatusHealthy, false, health.StatusStarting, takeover, true},
		{health.StatusStopping, false, health.StatusCrashed, monitor, false},
		{health.StatusStopping, false, health.StatusStopped, operator, false},
		{health.StatusHealthy, false, health.StatusStopped, operator, false}, // reset refuses running ones
		{health.StatusCrashed, false, health.StatusFailed, operator, false},
		{health.StatusFailed, false, health.StatusCrashed, monitor, false},
		{health.StatusNone, false, health.StatusStarting, takeover, false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/held=%v/%s/%s", statusName(tt.from), tt.held, tt.to, tt.actor)
		t.Run(name, func(t *testing.T) {
			if got := health.Allowed(tt.from, tt.held, tt.to, tt.actor); got != tt.want {
				t.Errorf("Allowed = %v, want %v", got, tt.want)
			}
		})
	}
}

func statusName(s health.Status) string {
	if s == health.StatusNone {
		return "none"
	}
	return string(s)
}

func TestTransitionError(t *testing.T) {
	id := health.ComponentID{Queue: "tag", Slot: 3}
	tests := []struct {
		err  *health.TransitionError
		want []string // pieces the message must name
	}{
		{
			&health.TransitionError{Component: id, From: health.StatusHealthy, To: health.StatusFailed, Actor: monitor},
			[]string{"worker:tag:3", "monitor", "from healthy", "to failed"},
		},
		{
			&health.TransitionError{Component: id, From: health.StatusNone, To: health.StatusHealthy, Actor: operator},
			[]string{"worker:tag:3", "operator", "from none", "to healthy"},
		},
		{
			&health.TransitionError{Component: id, From: health.StatusStopped, Held: true, To: health.StatusStarting, Actor: monitor},
			[]string{"worker:tag:3", "monitor", "from stopped+held", "to starting"},
		},
		{
			&health.TransitionError{Component: id, From: health.StatusCrashed, To: health.StatusCrashed, Actor: takeover},
			[]string{"worker:tag:3", "takeover", "from crashed", "to crashed"},
		},
	}
	for _, tt := range tests {
		msg := tt.err.Error()
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q does not contain %q", msg, w)
			}
		}
		var err error = fmt.Errorf("restart: %w", tt.err)
		if !errors.Is(err, health.ErrTransition) {
			t.Errorf("errors.Is(%v, ErrTransition) = false", err)
		}
		var te *health.TransitionError
		if !errors.As(err, &te) || te != tt.err {
			t.Errorf("errors.As did not find the *TransitionError in %v", err)
		}
	}
	if errors.Is(errors.New("transition not allowed"), health.ErrTransition) {
		t.Error("an unrelated error with the same text matched ErrTransition")
	}
}
