package queue

import (
	"context"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// handBackGrace is how long asynq's shutdown requeue of a task waits for
// the task's handler, cancelled first, to return.
const handBackGrace = 250 * time.Millisecond

// stuckGrace is how long a handler whose context ended outside a shutdown
// (its deadline, a cancel) is given to return. One that has not returned
// by then is stuck: asynq would retry or archive its task while it is
// still inside it, and an operator's retry, or the retry itself, would
// run it in a second handler: a hung handler's task archived at its
// timeout, then retried by an operator, would run in two processes at
// once (TestStuckHandlerKeepsItsTaskAndEndsTheWorker). Its task stays
// active under this process, its running record kept, and the worker
// exits as soon as its other tasks are done (ErrStuckHandler, counted as a crash): the supervisor then
// requeues the task, counting that crash against it, so that a job that
// keeps hanging ends toxic like one that keeps crashing. The handler
// cannot be stopped otherwise: Go has no way to end a goroutine.
const stuckGrace = handBackGrace

// handlerRun is one task's handler as the middleware runs it. Its states:
//
//	entered --run--> started --handler returned--> (returned closed)
//	entered, started --handBack--> handed back
//
// A task handed back before its handler started never starts it.
type handlerRun struct {
	started    bool
	handedBack bool
	stuck      bool // see stuckGrace
	cancel     context.CancelFunc
	returned   chan struct{} // closed when the handler's goroutine returned
	decided    chan struct{} // closed once stuck is known (decide)
	decideOnce sync.Once
}

func newRun() *handlerRun {
	return &handlerRun{returned: make(chan struct{}), decided: make(chan struct{})}
}

// handlerRuns are the handlers this process runs, by task id. Safe for
// concurrent use.
type handlerRuns struct {
	mu sync.Mutex
	m  map[string]*handlerRun
}

// enter registers a run of task id as the middleware takes it; false if
// the task was handed back already (asynq's shutdown requeue came first):
// the middleware must not run it.
func (h *handlerRuns) enter(id string) (*handlerRun, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*handlerRun{}
	}
	if r, ok := h.m[id]; ok && r.handedBack && !r.started {
		delete(h.m, id)
		return nil, false
	}
	r := newRun()
	h.m[id] = r
	return r, true
}

// start marks the handler started, with the cancel of its context; false if
// the task was handed back meanwhile (the handler must not start).
func (h *handlerRuns) start(r *handlerRun, cancel context.CancelFunc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.handedBack {
		return false
	}
	r.started, r.cancel = true, cancel
	return true
}

// leave forgets the run of task id once the middleware returned, unless
// its handler is stuck: the task stays this process's to its end.
func (h *handlerRuns) leave(id string, r *handlerRun) {
	h.decide(r, false)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[id] == r && !r.stuck {
		delete(h.m, id)
	}
}

// decide records once whether r's handler is stuck: its context ended
// (its deadline, a cancel) outside a shutdown, and it did not return
// within stuckGrace.
func (h *handlerRuns) decide(r *handlerRun, stuck bool) {
	r.decideOnce.Do(func() {
		h.mu.Lock()
		r.stuck = stuck
		h.mu.Unlock()
		close(r.decided)
	})
}

// stuck reports whether the handler of task id is stuck, waiting up to
// wait for the middleware to know (asynq writes a deadline's or a
// cancel's outcome without waiting for the middleware).
func (h *handlerRuns) stuck(id string, wait time.Duration, clk clock.Clock) bool {
	h.mu.Lock()
	r := h.m[id]
	h.mu.Unlock()
	if r == nil {
		return false
	}
	timeout := make(chan struct{})
	t := clk.AfterFunc(wait, func() { close(timeout) })
	defer t.Stop()
	select {
	case <-r.decided:
	case <-timeout:
		// Not decided in time (a machine too busy to run the
		// middleware): a handler still inside is taken for stuck, its
		// task kept; at worst, if it returns after all, the task is
		// requeued as stranded once its hold lapses.
		return h.inside(r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return r.stuck
}

// inside reports whether r's handler started and has not returned: it may
// still be inside its task, whatever its context says.
func (h *handlerRuns) inside(r *handlerRun) bool {
	h.mu.Lock()
	started := r.started
	h.mu.Unlock()
	if !started {
		return false
	}
	select {
	case <-r.returned:
		return false
	default:
		return true
	}
}

// handedBack reports whether r was handed back.
func (h *handlerRuns) handedBack(r *handlerRun) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return r.handedBack
}

// handBack is asked before asynq's shutdown requeue of task id is written
// (the hook, outcome.go). asynq puts the task back at its shutdown timeout
// and cancels the handler only after: another worker could take the task
// while this handler is still inside it: two handlers of one task
// (TestShutdownNeverHandsBackARunningHandler). Here the handler is cancelled first and waited for, up to
// handBackGrace. It reports whether the requeue may be written: yes once
// the handler returned, or if it never started (it never will); no while
// it is still inside. Then the task stays active under this process, held,
// and the supervisor's owner-scoped requeue puts it back once the process
// is gone.
func (w *worker) handBack(id string) bool {
	h := &w.runs
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*handlerRun{}
	}
	r, ok := h.m[id]
	if !ok {
		// Dequeued, not in the middleware yet: it will not run here.
		r := newRun()
		r.handedBack = true
		close(r.decided) // never runs here: not stuck
		h.m[id] = r
		h.mu.Unlock()
		return true
	}
	r.handedBack = true
	started, cancel := r.started, r.cancel
	h.mu.Unlock()
	if !started {
		return true
	}
	cancel()
	timeout := make(chan struct{})
	t := w.clock.AfterFunc(handBackGrace, func() { close(timeout) })
	defer t.Stop()
	select {
	case <-r.returned:
		return true
	case <-timeout:
		return false
	}
}
