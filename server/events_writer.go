package server

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of what a joining client's writer holds while the client catches
// up: past either, what it holds is let go and the catch-up reads on from
// the stream instead.
const (
	holdFrames = memoryLag
	holdBytes  = 1 << 20
)

// Modes of an sseWriter.
const (
	// modeHold: r3labs/sse's frames are kept in memory while the join
	// goroutine writes the client's snapshot and catch-up itself.
	modeHold int32 = iota
	// modeLive: frames go to the connection, those up to liveFrom skipped
	// (queued in the shared stream before the catch-up ended).
	modeLive
	// modeDropped: the client is being disconnected; frames are discarded,
	// so that r3labs/sse's loop drains its channel without the network.
	modeDropped
)

// sseWriter is the ResponseWriter r3labs/sse serves a client of a shared
// stream through. The broker writes the response's header itself before
// (r3labs's WriteHeader only says that its subscriber is registered), and
// the client's own start (snapshot, catch-up) beside it while it holds
// r3labs's frames; then frames pass through. Write and Flush are called by
// r3labs's loop only; hold, release and drop by others.
//
// What reaches the client goes through put and send: to the connection
// itself when the broker took it from net/http (conn, see hijack), else
// to the response (w, rc).
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// conn is the client's connection, taken from net/http: the response
	// is written to it in HTTP/1.1 chunks, each frame gathered in out
	// after chunkRoom bytes kept for its size line. err is the first
	// write error: the connection is closed then, and gone called (the
	// client's cancel), as net/http ends a request whose write failed.
	conn net.Conn
	out  []byte
	err  error
	gone func()
	// registered is closed at r3labs's WriteHeader: every entry published
	// to the stream from then on reaches this client.
	registered chan struct{}
	regOnce    sync.Once

	mode atomic.Int32
	// panicked is what a panic in Write or Flush left (recoverPanic).
	panicked atomic.Pointer[writerPanic]

	// The frame being written (r3labs's loop only): started says its first
	// line was seen, skip that it is not sent, held that it is kept; pass
	// that frames go straight through (Write).
	started, skip, buffered, pass bool
	cur                           []byte
	curID                         streamID

	mu       sync.Mutex
	held     []heldFrame
	heldSize int
	// overflow is the id of the last frame let go for want of room (zero:
	// none): the catch-up must reach it.
	overflow streamID
	// liveFrom: in modeLive, frames with an id up to it are skipped, until
	// the first one after it (filtering then ends).
	liveFrom  streamID
	filtering bool

	// busy is set while a write is under way and progress counts the
	// writes (the broker's watchdog reads both).
	busy     atomic.Bool
	progress atomic.Uint64
}

// heldFrame is one frame r3labs wrote while the client caught up.
type heldFrame struct {
	id streamID
	b  []byte
}

// init makes s write to w (whose controller is rc), or to conn when it is
// not nil; gone ends the client (a taken connection failed or closed).
func (s *sseWriter) init(w http.ResponseWriter, rc *http.ResponseController, conn net.Conn, gone func()) {
	s.w, s.rc, s.conn, s.gone, s.registered = w, rc, conn, gone, make(chan struct{})
}

// Chunks written to a taken connection: chunkRoom bytes kept before the
// data for its size line (up to 8 hex digits and CRLF), and a chunk sent
// once chunkMax bytes are gathered (a snapshot is written in many puts).
const (
	chunkRoom = 10
	chunkMax  = 4 << 10
)

// put writes p to the client, gathered until send on a taken connection.
func (s *sseWriter) put(p []byte) (int, error) {
	if s.conn == nil {
		return s.w.Write(p)
	}
	if s.err != nil {
		return 0, s.err
	}
	if len(s.out) == 0 {
		s.out = append(s.out[:0], make([]byte, chunkRoom)...)
	}
	s.out = append(s.out, p...)
	if len(s.out) >= chunkMax {
		return len(p), s.send()
	}
	return len(p), nil
}

// send writes out what put gathered: flushes the response, or writes one
// chunk to the connection. A write error on the connection closes it and
// ends the client (gone).
func (s *sseWriter) send() error {
	if s.conn == nil {
		return s.rc.Flush()
	}
	if s.err != nil || len(s.out) <= chunkRoom {
		return s.err
	}
	i := chunkRoom - 2
	s.out[i], s.out[i+1] = '\r', '\n'
	for n := len(s.out) - chunkRoom; ; n >>= 4 {
		i--
		s.out[i] = "0123456789abcdef"[n&0xf]
		if n < 16 {
			break
		}
	}
	s.out = append(s.out, '\r', '\n')
	_, err := s.conn.Write(s.out[i:])
	if cap(s.out) > 2*chunkMax {
		s.out = nil // a large write: do not keep its room
	} else {
		s.out = s.out[:0]
	}
	if err != nil {
		s.err = err
		closeConn(s.conn, true)
		s.gone()
	}
	return err
}

// sink is s as an io.Writer for the join's writes (joinPut).
type sink struct{ s *sseWriter }

func (w sink) Write(p []byte) (int, error) { return w.s.joinPut(p) }

// joinPut and joinSend are put and send for the join's writes (the
// snapshot, the catch-up), busy while under way and counted: the watchdog
// drops a client that does not read its start as it drops one that does
// not read its frames. (A start larger than the socket's buffers held a
// client that never read, its connection and its place, until Close.)
// joinPut writes a page of the catch-up (megabytes, with large entries)
// in pieces of joinPiece, each counted: a client that reads slowly but
// reads moves between two looks of the watchdog.
func (s *sseWriter) joinPut(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), joinPiece)
		err := s.watched(func() error {
			m, err := s.put(p[:k])
			n += m
			return err
		})
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (s *sseWriter) joinSend() error { return s.watched(s.send) }

// watched runs one write of the join's, busy while under way, and counts it.
func (s *sseWriter) watched(write func() error) error {
	s.busy.Store(true)
	err := write()
	s.busy.Store(false)
	s.progress.Add(1)
	return err
}

// joinPiece is the most joinPut writes at once: 64 KiB, which a client
// reading at 32 KiB/s takes within the watchdog's period.
const joinPiece = 64 << 10

// cut makes a write stuck on a client that does not read fail at once.
func (s *sseWriter) cut() {
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(time.Now())
		return
	}
	_ = s.rc.SetWriteDeadline(time.Now())
}

// watchConn waits on the taken connection for the client to go (or the
// connection to be closed), then ends the client (gone): net/http's
// background read. Like it, it stops at the first byte the client sends
// (nothing is expected after the request): the next failed write then
// ends the client.
func (s *sseWriter) watchConn() {
	var b [1]byte
	if n, err := s.conn.Read(b[:]); n == 0 || err != nil {
		s.gone()
	}
}

// end ends the response on a taken connection (the last chunk, unless it
// was dropped or failed) and closes it. The writers are done. A client
// that does not take the last chunk within stallCheck is cut (the
// watchdog looks only at joined clients).
func (s *sseWriter) end() {
	if s.mode.Load() == modeDropped || s.err != nil {
		closeConn(s.conn, true)
		return
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(stallCheck))
	_, err := s.conn.Write([]byte("0\r\n\r\n"))
	closeConn(s.conn, err != nil)
}

// closeConn closes a taken connection; hard, one over TLS is closed
// without its close_notify, which could wait 5 s for a client that does
// not read.
func closeConn(conn net.Conn, hard bool) {
	if tc, ok := conn.(*tls.Conn); ok && hard {
		_ = tc.NetConn().Close()
		return
	}
	_ = conn.Close()
}

// Header is the response's, written by open already: r3labs/sse sets the
// same three fields in it again, to no effect (a new map each time would
// cost three maps per client). On a taken connection it is a map
// of its own, unused: the response's is net/http's, and its middleware's
// once the handler returned.
func (s *sseWriter) Header() http.Header {
	if s.w == nil {
		return http.Header{}
	}
	return s.w.Header()
}

// WriteHeader is r3labs's, once its subscriber is registered.
func (s *sseWriter) WriteHeader(int) {
	s.regOnce.Do(func() { close(s.registered) })
}

// Write takes r3labs's frames piece by piece: the first line of a frame
// ("id: ..." or a comment) decides where the whole frame goes. Once the
// client has joined and its first frame past the catch-up went out
// (pass), frames go straight to the connection, nothing parsed or copied,
// until it is dropped.
func (s *sseWriter) Write(p []byte) (int, error) {
	defer s.recoverPanic()
	if s.pass {
		if s.mode.Load() == modeLive {
			if !s.started {
				s.started, s.skip = true, false
			}
			if !s.skip {
				// busy only while a write is under way: a handler that
				// waits for the processor between two lines of a frame
				// is not stuck (the watchdog).
				s.busy.Store(true)
				_, err := s.put(p)
				s.busy.Store(false)
				if err != nil {
					s.skip = true
				}
			}
			return len(p), nil
		}
		s.pass = false // dropped, for good
		if s.started {
			s.skip = true // the rest of the frame goes nowhere
			return len(p), nil
		}
	}
	if !s.started {
		s.startFrame(p)
	}
	switch {
	case s.skip:
	case s.buffered:
		s.cur = append(s.cur, p...)
	default:
		s.busy.Store(true)
		_, err := s.put(p)
		s.busy.Store(false)
		if err != nil {
			s.skip = true
		}
	}
	return len(p), nil
}

// startFrame decides what happens to the frame whose first write is p.
func (s *sseWriter) startFrame(p []byte) {
	s.started, s.skip, s.buffered = true, false, false
	id, hasID := frameID(p)
	s.curID = id
	switch s.mode.Load() {
	case modeDropped:
		s.skip = true
	case modeHold:
		// Comments (keep-alives) are not held; the frame may end live if
		// the writer is released meanwhile (Flush sees to it).
		s.buffered, s.skip = hasID, !hasID
	case modeLive:
		s.mu.Lock()
		if s.filtering && hasID {
			if id.cmp(s.liveFrom) <= 0 {
				s.skip = true
			} else {
				s.filtering = false
			}
		}
		s.mu.Unlock()
	}
}

// frameID parses r3labs's first line of an event, "id: <id>\n".
func frameID(p []byte) (streamID, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("id: "))
	if !ok {
		return zeroID, false
	}
	return parseStreamID(string(bytes.TrimSuffix(rest, []byte("\n"))))
}

// Flush ends r3labs's frame: a held one is kept (or, released meanwhile,
// written), a live one flushed to the client.
func (s *sseWriter) Flush() {
	defer s.recoverPanic()
	if s.pass {
		if s.mode.Load() == modeLive {
			if !s.started {
				return
			}
			s.started = false
			if !s.skip {
				s.busy.Store(true)
				_ = s.send()
				s.busy.Store(false)
				s.progress.Add(1)
			}
			return
		}
		s.pass = false
	}
	if !s.started {
		return // the flush after WriteHeader
	}
	s.started = false
	if s.skip {
		return
	}
	if s.buffered {
		kept, write := s.settle()
		if kept {
			return
		}
		frame := s.cur
		s.cur = s.cur[:0]
		if !write {
			return
		}
		s.busy.Store(true)
		_, err := s.put(frame)
		s.busy.Store(false)
		if err != nil {
			return
		}
	}
	s.busy.Store(true)
	_ = s.send()
	s.busy.Store(false)
	s.progress.Add(1)
	if s.mode.Load() == modeLive {
		// Past the catch-up's frames: the next ones pass through.
		s.mu.Lock()
		s.pass = !s.filtering
		s.mu.Unlock()
	}
}

// settle decides where the buffered frame in cur goes: kept (held while
// the client catches up), or written (live, past the catch-up's frames).
func (s *sseWriter) settle() (kept, write bool) {
	s.mu.Lock()
	defer s.mu.Unlock() // a panic must not leave mu held (recoverPanic)
	if s.mode.Load() == modeHold {
		s.keep()
		return true, false
	}
	write = s.mode.Load() == modeLive && (!s.filtering || s.curID.cmp(s.liveFrom) > 0)
	if write {
		s.filtering = false
	}
	return false, write
}

// writerPanic is a panic of the writer's, and where it happened.
type writerPanic struct {
	v     any
	stack []byte
}

// recoverPanic, deferred by Write and Flush, turns a panic of theirs into
// the end of this client alone: its frames are discarded from then on
// (mode dropped, without mu, which a panic may have left held by nobody
// else), and gone ends it; the broker logs the panic when the client
// finishes. r3labs/sse's loop goes on reading the subscriber's channel
// until the subscriber is removed. A panic let out of the loop would have
// left that channel full and the stream's loop blocked on it: every client
// of the pattern set held up, then the broker's reader, and Close.
func (s *sseWriter) recoverPanic() {
	v := recover()
	if v == nil {
		return
	}
	s.mode.Store(modeDropped)
	s.pass, s.skip = false, true
	s.panicked.CompareAndSwap(nil, &writerPanic{v: v, stack: debug.Stack()})
	s.gone()
}

// keep holds the frame in cur (mu held); past the limits everything held
// is let go and overflow says how far the catch-up must read.
func (s *sseWriter) keep() {
	defer func() { s.cur = s.cur[:0] }()
	if len(s.held) >= holdFrames || s.heldSize+len(s.cur) > holdBytes {
		s.held, s.heldSize = nil, 0
		s.overflow = s.curID
		return
	}
	s.held = append(s.held, heldFrame{id: s.curID, b: bytes.Clone(s.cur)})
	s.heldSize += len(s.cur)
}

// take returns the frames held so far and the overflow mark, and clears
// both.
func (s *sseWriter) take() ([]heldFrame, streamID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, o := s.held, s.overflow
	s.held, s.heldSize, s.overflow = nil, 0, zeroID
	return h, o
}

// release lets frames through from now on, skipping those up to from;
// false (nothing changed) when frames were held or let go since the last
// take: the caller takes them first.
func (s *sseWriter) release(from streamID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) > 0 || s.overflow != zeroID || s.mode.Load() != modeHold {
		return false
	}
	if cap(s.out) > 1<<10 {
		s.out = nil // what the snapshot grew it to: frames need less
	}
	s.liveFrom, s.filtering = from, true
	s.mode.Store(modeLive) // then r3labs's loop writes, out too
	return true
}

// drop discards every frame from now on.
func (s *sseWriter) drop() {
	s.mu.Lock()
	s.mode.Store(modeDropped)
	s.held, s.heldSize = nil, 0
	s.mu.Unlock()
}
