package health

import (
	"errors"
	"fmt"
	"slices"
)

// Status is a component's lifecycle state (docs/design.md §4).
type Status string

// Statuses. StatusNone is a component with no record yet.
const (
	StatusNone     Status = ""
	StatusStarting Status = "starting"
	StatusHealthy  Status = "healthy"
	// StatusRecovering: alive, inside a window it announced with a
	// heartbeat's recover_for (a known long operation); its heartbeat key
	// lives until the window ends, and its next ordinary beat makes it
	// healthy again.
	StatusRecovering Status = "recovering"
	StatusStopping   Status = "stopping"
	StatusStopped    Status = "stopped"
	StatusCrashed    Status = "crashed"
	StatusFailed     Status = "failed"
)

// Statuses lists every status a record can hold, in lifecycle order.
var Statuses = []Status{StatusStarting, StatusHealthy, StatusRecovering, StatusStopping, StatusStopped, StatusCrashed, StatusFailed}

// Running reports whether a process is expected to be alive in s.
func (s Status) Running() bool {
	return s == StatusStarting || s == StatusHealthy || s == StatusRecovering || s == StatusStopping
}

// Actor is who asks for a transition; some are the operator's alone.
type Actor int

// Actors.
const (
	// ActorMonitor is the supervisor acting on its own (spawn, crash,
	// restart after backoff, shutdown, reconcile).
	ActorMonitor Actor = iota
	// ActorOperator is a person through the API.
	ActorOperator
	// ActorTakeover is a host taking a slot over from a lost one.
	ActorTakeover
)

func (a Actor) String() string {
	switch a {
	case ActorMonitor:
		return "monitor"
	case ActorOperator:
		return "operator"
	case ActorTakeover:
		return "takeover"
	}
	return fmt.Sprintf("actor(%d)", int(a))
}

// state is a status with the held flag folded in, as the table needs it.
type state string

const heldStopped state = "stopped+held"

func stateOf(s Status, held bool) state {
	if s == StatusStopped && held {
		return heldStopped
	}
	return state(s)
}

type rule struct {
	from   []state
	to     Status
	actors []Actor
}

var (
	anyLocal = []Actor{ActorMonitor, ActorOperator}
	monitor  = []Actor{ActorMonitor}
	operator = []Actor{ActorOperator}
)

// transitions is docs/design.md §4's status machine. Anything else is refused.
var transitions = []rule{
	{[]state{"", "stopped", "crashed"}, StatusStarting, anyLocal},                                                 // spawn, restart after backoff, operator restart
	{[]state{"failed", heldStopped}, StatusStarting, operator},                                                    // operator restart only
	{[]state{"starting", "recovering"}, StatusHealthy, monitor},                                                   // first valid heartbeat; an ordinary beat ends a recovering window
	{[]state{"starting", "healthy", "recovering"}, StatusRecovering, monitor},                                     // a heartbeat with recover_for
	{[]state{"starting", "healthy", "recovering"}, StatusStopping, anyLocal},                                      // stop requested
	{[]state{"stopping"}, StatusStopped, monitor},                                                                 // process exited, or reconcile
	{[]state{"starting", "healthy", "recovering"}, StatusCrashed, monitor},                                        // exit, hang (a window that ran out included), bad heartbeat, start timeout, reconcile
	{[]state{"crashed"}, StatusFailed, monitor},                                                                   // policy limit
	{[]state{"crashed"}, StatusStopped, anyLocal},                                                                 // stop during backoff, host shutdown
	{[]state{"starting", "healthy", "recovering", "stopping", "crashed"}, StatusStarting, []Actor{ActorTakeover}}, // slot taken over
	{[]state{"failed", "crashed", "stopped", heldStopped}, StatusStopped, operator},                               // operator reset (held)
}

// ErrTransition is returned when the status machine forbids a change.
var ErrTransition = errors.New("transition not allowed")

// TransitionError says which change was refused.
type TransitionError struct {
	Component ComponentID
	From      Status
	Held      bool
	To        Status
	Actor     Actor
}

func (e *TransitionError) Error() string {
	from := string(stateOf(e.From, e.Held))
	if from == "" {
		from = "none"
	}
	return fmt.Sprintf("%s: %s cannot go from %s to %s", e.Component, e.Actor, from, e.To)
}

// Unwrap makes errors.Is(err, ErrTransition) hold.
func (e *TransitionError) Unwrap() error { return ErrTransition }

// Allowed reports whether actor may move a component from (from, held) to to.
func Allowed(from Status, held bool, to Status, actor Actor) bool {
	return slices.Contains(allowedFrom(to, actor), stateOf(from, held))
}

// allowedFrom lists the states from which actor may reach to.
func allowedFrom(to Status, actor Actor) []state {
	var out []state
	for _, r := range transitions {
		if r.to == to && slices.Contains(r.actors, actor) {
			out = append(out, r.from...)
		}
	}
	return out
}
