package queue

import (
	"sync"
	"time"
)

// holding is where a task this process dequeued stands, on this process's
// side. Transitions (anything else is ignored):
//
//	(none)   --dequeued-->          running
//	running  --middleware returned--> returned
//	running, returned --outcome answered or kept--> (none)
//	running  --handler stuck-->       stuck (to the process's end)
//	running  --give-back unanswered--> returning (prefetch.go)
//	returning --stranded-task sweep done--> (none)
//
// A task active in Redis under this process's owner field that is neither
// held nor kept (kept.go) runs nowhere: it is stranded (a dequeue whose
// reply was lost) and settle requeues it (stranded.go).
type holding uint8

const (
	holdNone     holding = iota
	holdRunning          // dequeued: asynq runs it, or is about to hand it to the middleware
	holdReturned         // the middleware returned: asynq is writing its outcome
	holdStuck            // its handler is stuck (stuckGrace): held until the process ends
	// holdReturning: taken ahead, never handed out, and its give-back got
	// no reply (it may have run). Not run here: the stranded-task sweep
	// requeues it if it is still this process's (snapshot leaves it out);
	// asynq's lease recovery must leave it (holds says yes: its owner
	// lives and puts it back).
	holdReturning
)

// returnedGrace is how long a returned task is still taken as held. asynq
// writes the outcome right after the middleware returns, unless the task's
// lease ran out (asynq then writes nothing and leaves it to lease
// recovery); after this long the task counts as stranded.
const returnedGrace = 30 * time.Second

// holdings are the tasks this process holds. Safe for concurrent use.
type holdings struct {
	mu sync.Mutex
	m  map[string]held
}

type held struct {
	state holding
	at    time.Time // when it entered state
	run   int64     // the dequeue's run token (runField)
}

func (h *holdings) dequeued(id string, run int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]held{}
	}
	h.m[id] = held{holdRunning, now, run}
}

// returned marks the middleware's return for a task it holds.
func (h *holdings) returned(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[id]; ok && e.state == holdRunning {
		h.m[id] = held{holdReturned, now, e.run}
	}
}

// stick marks a held task whose handler is stuck: held for good.
func (h *holdings) stick(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[id]; ok && e.state == holdRunning {
		h.m[id] = held{holdStuck, now, e.run}
	}
}

// returning marks tasks taken ahead whose give-back got no reply.
func (h *holdings) returning(ids []string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if e, ok := h.m[id]; ok {
			h.m[id] = held{holdReturning, now, e.run}
		}
	}
}

// swept forgets the returning tasks: a stranded-task sweep that left them
// out of the held list has put back those still this process's.
func (h *holdings) swept(ids []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.m[id].state == holdReturning {
			delete(h.m, id)
		}
	}
}

// runOf is the run token of the held task id (0: not held, or unknown).
func (h *holdings) runOf(id string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id].run
}

// resolve forgets a task: its outcome was answered, or kept.
func (h *holdings) resolve(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// count is how many tasks are held (a returned one past its grace too).
func (h *holdings) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// holds reports whether the task is held at now.
func (h *holdings) holds(id string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[id]
	return ok && (e.state != holdReturned || now.Sub(e.at) < returnedGrace)
}

// snapshot lists the tasks held at now, forgetting returned ones past their
// grace, and, apart, the returning ones (held for no one to run: the
// stranded-task sweep is to put them back).
func (h *holdings) snapshot(now time.Time) (ids, returning []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids = make([]string, 0, len(h.m))
	for id, e := range h.m {
		switch {
		case e.state == holdReturning:
			returning = append(returning, id)
		case e.state == holdReturned && now.Sub(e.at) >= returnedGrace:
			delete(h.m, id)
		default:
			ids = append(ids, id)
		}
	}
	return ids, returning
}
