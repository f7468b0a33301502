package queue

import (
	"context"
	"sync"
	"time"
)

// handBackGrace is how long asynq's shutdown requeue of a task waits for
// the task's handler, cancelled first, to return.
const handBackGrace = 250 * time.Millisecond

// handlerRun is one task's handler as the middleware runs it. Its states:
//
//	entered --run--> started --handler returned--> (returned closed)
//	entered, started --handBack--> handed back
//
// A task handed back before its handler started never starts it.
type handlerRun struct {
	started    bool
	handedBack bool
	cancel     context.CancelFunc
	returned   chan struct{} // closed when the handler's goroutine returned
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
	r := &handlerRun{returned: make(chan struct{})}
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

// leave forgets the run of task id once the middleware returned.
func (h *handlerRuns) leave(id string, r *handlerRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[id] == r {
		delete(h.m, id)
	}
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
// while this handler is still inside it (two handlers of one task, finding
// E8). Here the handler is cancelled first and waited for, up to
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
		h.m[id] = &handlerRun{handedBack: true, returned: make(chan struct{})}
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
