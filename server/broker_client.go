package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/r3labs/sse/v2"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// replayPage is how many stream entries a catch-up reads at a time.
const replayPage = 500

// notSeen is a client's seen before the watchdog's first look at it: a
// write under way then may have begun just now.
const notSeen = ^uint64(0)

// errDropped ends the join of a client dropped meanwhile (it lagged, or
// the broker is closing).
var errDropped = errors.New("the client was dropped")

// client is one connection to GET /api/v1/events.
type client struct {
	id     string
	sub    subscription
	remote string
	addr   string // the client address its place was acquired for
	// cancel ends the client's context (it is the broker's: a client on a
	// connection taken from net/http outlives its handler); stop, when
	// net/http keeps the connection, stops ending it with the request's.
	cancel context.CancelFunc
	stop   func() bool
	// req is the request r3labs/sse serves: its group's with the client's
	// context.
	req *http.Request
	// w is what r3labs/sse writes the group's stream through (one
	// allocation with the client).
	w        sseWriter
	g        *group
	dropOnce sync.Once

	// wg counts the join goroutine, rwg the reader of a taken connection
	// (watchConn).
	wg, rwg sync.WaitGroup

	// Under the broker's mu. joined: caught up, its frames pass through.
	// While it catches up: seq, the broker's entry count when it connected,
	// and cursor, the last entry it had (broker.behind). seen: its
	// writer's progress at the watchdog's last look (notSeen before it).
	joined bool
	seq    int64
	cursor streamID
	seen   uint64
}

// drop ends the connection: no frame is written after it, its context
// ends (r3labs/sse then removes the subscriber and its handler returns) and
// a write stuck on a client that does not read fails at once.
func (c *client) drop() {
	c.dropOnce.Do(func() {
		c.w.drop()
		c.cancel()
		c.w.cut()
	})
}

// serve streams events to one client until it goes away, is dropped, or
// the broker closes. The caller has acquired a place for it. lastID is the
// Last-Event-ID it resumes from ("" for a fresh snapshot).
func (b *broker) serve(w http.ResponseWriter, r *http.Request, sub subscription, lastID, addr string) {
	e, err := b.sharedEnds(r.Context())
	c := b.open(w, r, sub, lastID, addr, &e, err)
	if c == nil {
		return
	}
	b.stream(c)
}

// stream serves an opened client through r3labs/sse and then finishes it:
// on a connection taken from net/http, on a goroutine of its own (the
// handler returns, and net/http lets go of what it kept for the
// connection); else here.
func (b *broker) stream(c *client) {
	if c.w.conn != nil {
		go func() {
			defer b.finish(c)
			// A panic of r3labs/sse's ends this client only, as
			// net/http's recovery did for a handler (the writer
			// recovers its own: recoverPanic).
			defer func() {
				if v := recover(); v != nil {
					b.log.Error("events: panic serving a client", "client", c.id, "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
				}
			}()
			b.sse.ServeHTTP(&c.w, c.req)
		}()
		return
	}
	defer b.finish(c)
	b.sse.ServeHTTP(&c.w, c.req)
}

// open starts serving one client, for whom the caller has acquired a place,
// and returns it, to be served by r3labs/sse (with c.w and c.req) and then
// finished; nil when it could not start (answered, place released).
//
// The client joins the r3labs/sse stream of its pattern set at once,
// through an sseWriter that holds the stream's frames while a goroutine of
// the client's writes its snapshot and catch-up; then only the held frames
// after the catch-up are written, and the rest pass through.
//
// e and err are the stream's ends as sharedEnds read them for it (plan).
//
// What open does is done here and not under r3labs/sse's loop, whose
// caller's frames stay on the connection's stack for as long as it lasts
// (Server.ServeHTTP).
func (b *broker) open(w http.ResponseWriter, r *http.Request, sub subscription, lastID, addr string, e *streamEnds, err error) *client {
	if err != nil {
		if b.ctx.Err() != nil {
			writeProblem(w, http.StatusServiceUnavailable, "the admin server is shutting down")
		} else {
			b.log.Warn("events: read the stream for a client", "err", err)
			writeProblem(w, http.StatusServiceUnavailable, "read the event stream: "+publicError(err))
		}
		b.release(addr)
		return nil
	}
	p := plan(lastID, *e)
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed { // answered before the connection is taken
		writeProblem(w, http.StatusServiceUnavailable, "the admin server is shutting down")
		b.release(addr)
		return nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
	c := &client{sub: sub, remote: r.RemoteAddr, addr: addr, cancel: cancel, seen: notSeen}
	var rc *http.ResponseController
	conn := hijack(w, r)
	if conn == nil {
		rc = http.NewResponseController(w)
		// An event stream outlives any server-wide write timeout.
		_ = rc.SetWriteDeadline(time.Time{})
		c.stop = context.AfterFunc(r.Context(), cancel)
		c.w.init(w, rc, nil, cancel)
	} else {
		// Nothing of net/http's is kept: its response holds the
		// connection's buffers, and its header map is the middleware's
		// once the handler returns.
		c.w.init(nil, nil, conn, cancel)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		if conn != nil {
			_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			closeConn(conn, true)
		} else {
			writeProblem(w, http.StatusServiceUnavailable, "the admin server is shutting down")
			c.stop()
		}
		cancel()
		b.release(addr)
		return nil
	}
	b.nextID++
	c.id = strconv.FormatUint(b.nextID, 10)
	c.g = b.groupOf(sub)
	c.sub = c.g.sub // one copy per pattern set
	c.g.clients[c] = struct{}{}
	b.clients[c.id] = c
	b.catching[c] = struct{}{}
	b.clientsMoved()
	c.seq, c.cursor = b.seq, p.cursor
	c.req = c.g.req.WithContext(ctx)
	b.mu.Unlock()

	// The header r3labs/sse would write, written once, here.
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if conn != nil {
		if err := writeHead(conn, h); err != nil {
			c.w.err = err // nothing more is written to it, the last chunk neither
			cancel()      // the client is gone: join and r3labs/sse end
		}
		c.rwg.Add(1)
		go func() {
			defer c.rwg.Done()
			c.w.watchConn()
		}()
	} else {
		h.Set("Connection", "keep-alive")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
	}

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.join(ctx, c, &p)
	}()
	return c
}

// finish ends a client opened by open once r3labs/sse is done with it (its
// context ended and the subscriber was removed), and releases its place.
func (b *broker) finish(c *client) {
	defer b.release(c.addr)
	if p := c.w.panicked.Load(); p != nil {
		b.log.Error("events: panic serving a client", "client", c.id, "remote", c.remote, "panic", p.v, "stack", string(p.stack))
	}
	c.cancel()
	c.wg.Wait()
	if c.w.conn != nil {
		c.w.end()
		c.rwg.Wait()
	} else {
		c.stop()
	}
	b.mu.Lock()
	gone := b.leave(c)
	delete(b.clients, c.id)
	delete(b.catching, c)
	b.clientsMoved()
	b.mu.Unlock()
	if gone != "" {
		// No subscriber is left: none waits to deregister.
		b.sse.RemoveStream(gone)
	}
}

// clientsMoved wakes whoever waits for a client to come, leave or catch
// up (mu held).
func (b *broker) clientsMoved() {
	close(b.moved)
	b.moved = make(chan struct{})
}

// groupOf returns the group of sub, made with its stream if it has none
// (mu held).
func (b *broker) groupOf(sub subscription) *group {
	g := b.groups[sub.key]
	if g == nil {
		b.nextID++
		stream := "g" + strconv.FormatUint(b.nextID, 10)
		g = &group{sub: sub, stream: stream, clients: map[*client]struct{}{}}
		// No Last-Event-ID: r3labs/sse wants a number; ours are stream
		// ids, handled by join.
		g.req = &http.Request{Method: http.MethodGet, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			URL: &url.URL{Path: eventsPath, RawQuery: url.Values{"stream": {stream}}.Encode()}}
		b.sse.CreateStream(g.stream)
		b.groups[sub.key] = g
		b.fresh[sub.key] = g
		b.subsGen++
	}
	return g
}

// leave takes c out of its group (mu held) and returns the stream to
// remove when it was the group's last client.
func (b *broker) leave(c *client) string {
	c.joined = false
	g := c.g
	if g == nil {
		return ""
	}
	c.g = nil
	delete(g.clients, c)
	if len(g.clients) > 0 || b.groups[g.sub.key] != g {
		return ""
	}
	delete(b.groups, g.sub.key)
	delete(b.fresh, g.sub.key)
	b.subsGen++
	return g.stream
}

// join sends the client its start: a snapshot (or, resuming, what it
// missed; or reset and a snapshot when that is gone), then catches up with
// the stream and lets its group's frames through, with no gap and no
// duplicate. It waits until r3labs/sse has registered the client's
// subscriber: every entry the broker publishes after that reaches it.
func (b *broker) join(ctx context.Context, c *client, p *planned) {
	select {
	case <-c.w.registered:
	case <-ctx.Done():
		return
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		return
	}
	// Waited for here, not deeper: the stacks of the clients that wait
	// count in the size every new goroutine starts with.
	var frames [][]byte
	var err error
	if p.snapshot {
		frames, err = b.sharedSnapshot(ctx, c.sub)
	}
	if err == nil {
		err = b.begin(c, p, frames)
	}
	if err == nil {
		err = b.catchUp(ctx, c, p.cursor)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, errDropped) {
		b.log.Warn("events: start a client", "client", c.id, "err", err)
		c.drop()
	}
}

// catchUp sends c the matching entries after cursor from the stream, up to
// the broker's position now (every later entry is among the frames its
// writer holds), then the held frames after them, and lets the frames
// through.
func (b *broker) catchUp(ctx context.Context, c *client, cursor streamID) error {
	b.mu.Lock()
	target := b.pos
	b.mu.Unlock()
	var pending []heldFrame
	for {
		var err error
		if cursor, err = b.replay(ctx, c, cursor, target); err != nil {
			return err
		}
		cut := cursor // held frames up to it came from the stream too
		for {
			n := 0
			for _, f := range pending {
				if f.id.cmp(cut) > 0 {
					if _, err := c.w.joinPut(f.b); err != nil {
						return err
					}
					cursor, n = f.id, n+1
				}
			}
			if n > 0 {
				if err := c.w.joinSend(); err != nil {
					return err
				}
				b.mu.Lock()
				c.cursor = cursor
				b.mu.Unlock()
			}
			held, over := c.w.take()
			if over.cmp(cursor) > 0 {
				// Frames were let go: read them from the stream.
				pending, target = held, over
				break
			}
			if len(held) > 0 {
				pending = held
				continue
			}
			if c.w.release(cut) {
				b.mu.Lock()
				defer b.mu.Unlock()
				delete(b.catching, c)
				c.joined = b.clients[c.id] == c
				b.clientsMoved()
				return nil
			}
			if c.w.mode.Load() == modeDropped {
				// Dropped with nothing left to write: release never
				// succeeds, and this loop would spin (and the client's
				// finish wait for it) forever.
				return errDropped
			}
			pending = nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// replay writes c the matching events after cursor up to target from the
// stream and returns the last id it is done with. From the id of an
// entry's own event it reads that entry again: its also event may be due.
func (b *broker) replay(ctx context.Context, c *client, cursor, target streamID) (streamID, error) {
	rdb, key := b.store.Client(), b.store.Keys().Events()
	var buf bytes.Buffer
	for cursor.cmp(target) < 0 {
		start := "(" + cursor.entry()
		if cursor.n == 0 {
			start = cursor.entry()
		}
		msgs, err := readAfter(ctx, rdb, key, cursor, start, target.entry(), replayPage)
		if err != nil {
			return cursor, err
		}
		buf.Reset()
		from := cursor
		for _, m := range msgs {
			id, ok := parseStreamID(m.ID)
			if !ok {
				continue
			}
			own, second := frame(m, id)
			events := []entry{own, second}
			if !second.also {
				events = events[:1]
			}
			for _, e := range events {
				if e.id.cmp(cursor) <= 0 {
					continue // sent before
				}
				if e.ev != nil && c.sub.match(e.topic) {
					appendFrame(&buf, e.ev)
				}
				cursor = e.id
			}
		}
		if cursor == from {
			return target, nil // trimmed meanwhile: nothing to send
		}
		if buf.Len() > 0 {
			if _, err := c.w.joinPut(buf.Bytes()); err != nil {
				return cursor, err
			}
			if err := c.w.joinSend(); err != nil {
				return cursor, err
			}
		}
		b.mu.Lock()
		c.cursor = cursor
		b.mu.Unlock()
	}
	return cursor, nil
}

// appendFrame appends ev as r3labs/sse frames it.
func appendFrame(buf *bytes.Buffer, ev *sse.Event) {
	buf.WriteString("id: ")
	buf.Write(ev.ID)
	buf.WriteString("\ndata: ")
	buf.Write(ev.Data)
	buf.WriteString("\nevent: ")
	buf.Write(ev.Event)
	buf.WriteString("\n\n")
}

// plan decides, before the response starts, where a client's catch-up
// begins, so that every change written after it saw the response reaches
// it: after lastID when the stream still holds everything after it; else
// (no lastID, or one that is unknown or trimmed) at the stream's end as it
// is now, with a fresh snapshot (after a reset event when the client asked
// to resume).
type planned struct {
	cursor   streamID
	snapshot bool
	reset    string // why lastID cannot be resumed from
	lastID   string
}

func plan(lastID string, e streamEnds) planned {
	p := planned{lastID: lastID, snapshot: true}
	from, ok := zeroID, true
	if lastID != "" {
		if from, ok = parseStreamID(lastID); !ok {
			p.reset = "Last-Event-ID is not a stream id"
		}
	}
	if lastID != "" && ok {
		switch {
		case !e.any && from == zeroID:
			return planned{cursor: from}
		case !e.any:
			p.reset = "the event stream is empty (Redis lost its data?)"
		case from.cmp(e.last) > 0:
			p.reset = "Last-Event-ID is newer than the stream's last event (another Redis?)"
		case from.cmp(e.first) < 0:
			p.reset = "events after Last-Event-ID were trimmed from the stream"
		default:
			return planned{cursor: from}
		}
	}
	p.cursor = e.last
	return p
}

// streamEnds is what plan needs of the stream: whether it has entries,
// its first entry's id and the id of its last event (endOf).
type streamEnds struct {
	any         bool
	first, last streamID
}

// endsRead is one read of the stream's ends, shared by the clients that
// wait for it.
type endsRead struct {
	done chan struct{}
	ends streamEnds
	err  error
}

// sharedEnds reads the stream's ends for plan, read after the call began
// (a client's cursor may not be older than its request, nor its
// Last-Event-ID judged against an older end): clients that connect together
// share one read, and a read under way when it is called started too
// early: it waits for the next one. A storm of connections then costs
// Redis a read at a time, not one per client at once (which also grew the
// connection pool to its size and left each handler's stack deep in it).
func (b *broker) sharedEnds(ctx context.Context) (streamEnds, error) {
	r, wait, lead := b.endsReadFor()
	if lead {
		b.leadEnds(r, wait)
	}
	select {
	case <-r.done:
		return r.ends, r.err
	case <-ctx.Done():
		return streamEnds{}, ctx.Err()
	}
}

// endsReadFor returns the read a caller of sharedEnds waits for, whether
// it leads it, and what it must wait for first.
func (b *broker) endsReadFor() (r *endsRead, wait chan struct{}, lead bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onEndsWait != nil {
		b.onEndsWait()
	}
	switch {
	case b.endsNext != nil:
		return b.endsNext, nil, false
	case b.endsRunning != nil:
		b.endsNext = &endsRead{done: make(chan struct{})}
		return b.endsNext, b.endsRunning.done, true
	default:
		b.endsRunning = &endsRead{done: make(chan struct{})}
		return b.endsRunning, nil, true
	}
}

// leadEnds makes read r, once the one before it (wait) is done. Not
// inlined: the clients waiting in sharedEnds keep its frame small.
//
//go:noinline
func (b *broker) leadEnds(r *endsRead, wait chan struct{}) {
	if wait != nil {
		<-wait // the read before ends whatever the clients do
		b.mu.Lock()
		b.endsRunning, b.endsNext = r, nil
		b.mu.Unlock()
	}
	// The broker's context: the clients waiting for it may outlive the one
	// that leads it.
	r.ends, r.err = b.readEnds(b.ctx)
	b.mu.Lock()
	if b.endsRunning == r {
		b.endsRunning = nil
	}
	b.mu.Unlock()
	close(r.done)
}

// readEnds reads the stream's first and last entries in one round trip.
func readEnds(ctx context.Context, rdb redis.UniversalClient, key string) (streamEnds, error) {
	pipe := rdb.Pipeline()
	first := pipe.XRangeN(ctx, key, "-", "+", 1)
	last := pipe.XRevRangeN(ctx, key, "+", "-", 1)
	if _, err := pipe.Exec(ctx); err != nil {
		return streamEnds{}, err
	}
	f, l := first.Val(), last.Val()
	if len(f) == 0 || len(l) == 0 {
		return streamEnds{}, nil
	}
	return streamEnds{any: true, first: mustID(f[0].ID), last: endOf(l[0])}, nil
}

// begin writes what comes before the catch-up: the reset event and the
// snapshot, if the plan has them, with the cursor's id.
func (b *broker) begin(c *client, p *planned, frames [][]byte) error {
	if !p.snapshot {
		return nil
	}
	id := []byte(p.cursor.String())
	// Written piece by piece into the response's own buffer (or the
	// writer's): nothing is allocated per client but the id.
	w := sink{&c.w}
	if p.reset != "" {
		data, _ := json.Marshal(ResetData{LastEventID: truncate(p.lastID, 64), Reason: p.reset})
		ev, _ := json.Marshal(health.Event{Type: health.EventReset, Timestamp: b.clock.Now().UnixMilli(), Data: data})
		if err := writeFrame(w, id, health.EventReset, ev); err != nil {
			return err
		}
	}
	for _, data := range frames {
		if err := writeFrame(w, id, health.EventSnapshot, data); err != nil {
			return err
		}
	}
	return c.w.joinSend()
}

// writeFrame writes an event to w as r3labs/sse frames it.
func writeFrame(w io.Writer, id []byte, event string, data []byte) error {
	_, err1 := io.WriteString(w, "id: ")
	_, err2 := w.Write(id)
	_, err3 := io.WriteString(w, "\ndata: ")
	_, err4 := w.Write(data)
	_, err5 := io.WriteString(w, "\nevent: ")
	_, err6 := io.WriteString(w, event)
	_, err7 := io.WriteString(w, "\n\n")
	return cmp.Or(err1, err2, err3, err4, err5, err6, err7)
}

// ResetData is the payload of a reset event: the client's Last-Event-ID
// could not be resumed from, and a fresh snapshot follows.
type ResetData struct {
	LastEventID string `json:"last_event_id" doc:"The id the client asked to resume from"`
	Reason      string `json:"reason" example:"events after Last-Event-ID were trimmed from the stream" doc:"Why it cannot be resumed from"`
}
