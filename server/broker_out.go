package server

import (
	"sync"
	"sync/atomic"
)

// outbox is what waits in memory for one event client: SSE messages,
// framed, appended by the fan-out without waiting and written by the
// client's handler.
type outbox struct {
	mu  sync.Mutex
	q   [][]byte
	max int
	// behind: the fan-out left the client out after what q holds; its
	// handler is to catch it up from the stream after resume. ended: its
	// handler is to return. (Here rather than under the broker's lock,
	// which the fan-out holds while it fills every client's outbox.)
	behind bool
	resume streamID
	ended  bool
	// wake has a token when the handler has something to do.
	wake chan struct{}
}

func (o *outbox) init(max int) {
	o.max = max
	o.wake = make(chan struct{}, 1)
}

// try appends frame unless the outbox is full (false), and wakes the
// handler.
func (o *outbox) try(frame []byte) bool {
	if !o.add(frame) {
		return false
	}
	o.poke()
	return true
}

// add appends frame unless the outbox is full (false); the caller wakes
// the handler.
func (o *outbox) add(frame []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.q) >= o.max {
		return false
	}
	o.q = append(o.q, frame)
	return true
}

// poke wakes the handler.
func (o *outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns what waits, leaving spare (emptied) in its place, and
// whether the handler is to catch up after that (from resume) or return.
func (o *outbox) take(spare [][]byte) (q [][]byte, behind bool, resume streamID, ended bool) {
	o.mu.Lock()
	q, behind, resume, ended = o.q, o.behind, o.resume, o.ended
	o.q, o.behind = spare[:0], false
	o.mu.Unlock()
	return q, behind, resume, ended
}

// fellBehind marks the client left out of the fan-out after resume.
func (o *outbox) fellBehind(resume streamID) {
	o.mu.Lock()
	o.behind, o.resume = true, resume
	o.mu.Unlock()
	o.poke()
}

// end tells the handler to return.
func (o *outbox) end() {
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
	o.poke()
}

// sseFrame is one SSE message as written on the wire: id, data, event
// (the order r3labs/sse writes them in), and the blank line. data holds no
// line break.
func sseFrame(id, typ string, data []byte) []byte {
	f := make([]byte, 0, len(id)+len(data)+len(typ)+len("id: \ndata: \nevent: \n\n"))
	f = append(f, "id: "...)
	f = append(f, id...)
	f = append(f, "\ndata: "...)
	f = append(f, data...)
	f = append(f, "\nevent: "...)
	f = append(f, typ...)
	f = append(f, "\n\n"...)
	return f
}

// broadcast wakes every goroutine waiting on it at once (closing a
// channel readies them all in one call). A waiter takes the channel, then
// checks for work, then waits on it: a wake after the check closes the
// channel it took, or one taken after that.
type broadcast struct{ ch atomic.Pointer[chan struct{}] }

func newBroadcast() *broadcast {
	b := &broadcast{}
	ch := make(chan struct{})
	b.ch.Store(&ch)
	return b
}

// C is the channel the next wake closes.
func (b *broadcast) C() <-chan struct{} { return *b.ch.Load() }

// wake closes the current channel, in place of a fresh one (one waker at
// a time: the fan-out's goroutine).
func (b *broadcast) wake() {
	ch := make(chan struct{})
	close(*b.ch.Swap(&ch))
}
