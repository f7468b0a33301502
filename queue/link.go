package queue

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// linkState is whether this worker can use Redis. A worker never exits for
// want of Redis (docs/design.md §11): while it cannot reach it, it takes no task,
// lets the running ones finish, keeps the outcomes it cannot write, and
// carries on when Redis answers.
type linkState int32

const (
	// linkUp: Redis answers; dequeues go through.
	linkUp linkState = iota
	// linkDown: a command got no reply. Dequeues are refused here (asynq
	// sees an empty queue), asynq's lease extensions are answered here
	// (its tasks keep running), and Redis is probed.
	linkDown
	// linkSettling: a probe was answered. The kept outcomes are written and
	// the tasks stranded under this process are requeued; dequeues are
	// still refused until that is done.
	linkSettling
)

func (s linkState) String() string {
	switch s {
	case linkUp:
		return "up"
	case linkDown:
		return "down"
	case linkSettling:
		return "settling"
	}
	return "unknown"
}

// linkEvent is what happens to the link.
type linkEvent int

const (
	evNoAnswer       linkEvent = iota // a command got no reply (faultNoAnswer)
	evProbeAnswered                   // Redis answered the probe
	evSettled                         // kept outcomes written, stranded tasks requeued
	evSettleNoAnswer                  // settling got no reply
)

func (e linkEvent) String() string {
	return [...]string{"no_answer", "probe_answered", "settled", "settle_no_answer"}[e]
}

// linkTransitions is the link's transition table; an event not listed for
// a state changes nothing.
var linkTransitions = map[linkState]map[linkEvent]linkState{
	linkUp:       {evNoAnswer: linkDown},
	linkDown:     {evProbeAnswered: linkSettling},
	linkSettling: {evNoAnswer: linkDown, evSettleNoAnswer: linkDown, evSettled: linkUp},
}

// link holds the state; the worker's watchLink goroutine acts on it.
type link struct {
	clock clock.Clock

	state atomic.Int32 // linkState, read on every dequeue

	mu      sync.Mutex
	downAt  time.Time     // when it last left up
	cause   error         // what took it down
	wake    chan struct{} // a transition happened (cap 1)
	upCh    chan struct{} // closed when the link is next up
	onTrans func(from, to linkState, ev linkEvent, cause error)
}

func newLink(c clock.Clock) *link {
	return &link{clock: c, wake: make(chan struct{}, 1), upCh: closedChan()}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (l *link) current() linkState { return linkState(l.state.Load()) }

func (l *link) isUp() bool { return l.current() == linkUp }

// up returns a channel closed once the link is up (already closed if it is).
func (l *link) up() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.upCh
}

// fire applies ev; it reports the transition, if any.
func (l *link) fire(ev linkEvent, cause error) (from, to linkState, moved bool) {
	l.mu.Lock()
	from = l.current()
	to, ok := linkTransitions[from][ev]
	if !ok || to == from {
		l.mu.Unlock()
		return from, from, false
	}
	l.state.Store(int32(to))
	switch {
	case from == linkUp:
		l.downAt, l.cause = l.clock.Now(), cause
		l.upCh = make(chan struct{})
	case to == linkUp:
		close(l.upCh)
	}
	if to == linkDown && cause != nil {
		l.cause = cause
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	notify := l.onTrans
	l.mu.Unlock()
	if notify != nil {
		notify(from, to, ev, cause)
	}
	return from, to, true
}

// poke wakes the link's loop without a transition (an outcome was kept
// while the link is up: Redis refused it).
func (l *link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// downSince returns when the link last left up, and why.
func (l *link) downSince() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.downAt, l.cause
}
