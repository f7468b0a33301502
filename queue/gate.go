package queue

import "context"

// handlerGate lets a worker's handlers run side by side, or one alone. A
// task with a crash on record runs alone: when a worker dies with several
// handlers in flight the crash counts against each (the recovery cannot
// tell whose handler killed it), and only a crash with its handler alone
// in the process can be held against a task for good (the middleware's
// toxic rule). Running it alone makes its next crash, if any, such a
// crash; its neighbours wait before their handlers begin, so a crash then
// counts nothing against them: a toxic task never gets its neighbour
// archived beside it (TestToxicJobSparesItsNeighbour,
// TestSharedCrashesAloneAreNotToxic).
//
// slots holds one token per handler running; alone takes every token.
// turn (one token) orders takers, so that a task waiting to run alone is
// not starved by handlers arriving after it.
type handlerGate struct {
	turn  chan struct{}
	slots chan struct{}
}

func newHandlerGate(n int) *handlerGate {
	return &handlerGate{turn: make(chan struct{}, 1), slots: make(chan struct{}, max(n, 1))}
}

// enter waits until a handler may run (alone: with no other running) and
// returns its release, or ctx's error if ctx ends first.
func (g *handlerGate) enter(ctx context.Context, alone bool) (func(), error) {
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-g.turn }()
	n := 1
	if alone {
		n = cap(g.slots)
	}
	for i := range n {
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			for range i {
				<-g.slots
			}
			return nil, ctx.Err()
		}
	}
	return func() {
		for range n {
			<-g.slots
		}
	}, nil
}
