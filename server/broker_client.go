package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// replayPage is how many stream entries a catch-up reads at a time.
const replayPage = 500

// client is one connection to GET /api/v1/events. Its handler goroutine
// is the only one that writes to it: first its start (snapshot, catch-up),
// then its outbox, and again a catch-up when it fell behind. It holds no
// context of its own while it streams (a connection's would cost more
// than the rest of its state): ended tells its handler to return, and its
// Redis reads run under a context that lives as long as they do.
type client struct {
	id     string
	sub    subscription
	remote string
	w      http.ResponseWriter
	rc     *http.ResponseController
	out    outbox
	// tick is its group's broadcast while it is in the live fan-out.
	tick atomic.Pointer[broadcast]
	// spare is the outbox's last batch, kept for the next (handler only).
	spare [][]byte

	// Under the broker's mu. joined: in the live fan-out, where entries up
	// to from reached it through its own catch-up, and last is the last one
	// queued for it. seq: while it catches up, the broker's entry count at
	// its position (its lag is the broker's count minus seq). ended: its
	// handler is to return (the outbox says so too); cancelRead ends the
	// Redis read it is in, if any.
	joined     bool
	ended      bool
	cut        bool
	cancelRead context.CancelFunc
	from       streamID
	last       streamID
	seq        int64
}

// end tells c's handler to return, ending its Redis read if it is in one
// (mu held).
func (c *client) end() {
	if c.ended {
		return
	}
	c.ended = true
	if c.cancelRead != nil {
		c.cancelRead()
	}
	c.out.end()
}

// drop ends the connection (mu held): its handler returns, and a write
// stuck on a client that does not read fails at once.
func (c *client) drop() {
	c.end()
	if !c.cut {
		c.cut = true
		_ = c.rc.SetWriteDeadline(time.Now())
	}
}

// reading returns a context for c's Redis reads, which end() cancels, and
// its release; ok is false when c has ended. It is the broker's, not the
// request's: a child of the request's context would leave the request a
// map of children for as long as the connection lasts (a client that goes
// away meanwhile fails its next write).
func (b *broker) reading(c *client) (ctx context.Context, release func(), ok bool) {
	ctx, cancel := context.WithCancel(b.ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.ended {
		cancel()
		return nil, nil, false
	}
	c.cancelRead = cancel
	return ctx, func() {
		b.mu.Lock()
		c.cancelRead = nil
		b.mu.Unlock()
		cancel()
	}, true
}

// errGone is a write to a client that went away (not worth a log line).
var errGone = errors.New("the event client went away")

// write writes one SSE message (buffered; flush sends it).
func (c *client) write(frame []byte) error {
	if _, err := c.w.Write(frame); err != nil {
		return errGone
	}
	return nil
}

func (c *client) flush() error {
	if c.rc.Flush() != nil {
		return errGone
	}
	return nil
}

// drain writes what waits in the outbox, in one flush, and says whether
// the handler is to catch up (from resume) or return.
func (c *client) drain() (behind bool, resume streamID, ended bool, err error) {
	q, behind, resume, ended := c.out.take(c.spare)
	c.spare = nil
	if len(q) == 0 {
		c.spare = q
		return behind, resume, ended, nil
	}
	for _, f := range q {
		if err := c.write(f); err != nil {
			return behind, resume, ended, err
		}
	}
	clear(q)
	if cap(q) <= spareMax {
		c.spare = q
	}
	return behind, resume, ended, c.flush()
}

// spareMax bounds the batch kept between two drains: an idle client holds
// little, one after a burst gives its batch back to the GC.
const spareMax = 16

// serve streams events to one client until it goes away, is dropped, or
// the broker closes. The caller has acquired a place for it. lastID is the
// Last-Event-ID it resumes from ("" for a fresh snapshot).
func (b *broker) serve(w http.ResponseWriter, r *http.Request, sub subscription, lastID, addr string) {
	defer b.release(addr)
	c := &client{sub: sub, remote: r.RemoteAddr, w: w, rc: http.NewResponseController(w)}
	c.out.init(b.outMax)
	// An event stream outlives any server-wide write timeout.
	_ = c.rc.SetWriteDeadline(time.Time{})
	p, err := b.plan(r.Context(), lastID)
	if err != nil {
		b.log.Warn("events: read the stream for a client", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "read the event stream: "+publicError(err))
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		writeProblem(w, http.StatusServiceUnavailable, "the admin server is shutting down")
		return
	}
	b.nextID++
	c.id = strconv.FormatUint(b.nextID, 10)
	if g := b.groups[sub.key]; g != nil {
		c.sub = g.sub // one parsed copy per pattern set
	}
	b.clients[c.id] = c
	b.catching[c] = struct{}{}
	c.seq = b.seq
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		c.ended = true
		b.leave(c)
		delete(b.clients, c.id)
		delete(b.catching, c)
		b.mu.Unlock()
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	// The headers leave with the snapshot, in one write.
	w.WriteHeader(http.StatusOK)
	if !b.join(c, p) || c.flush() != nil {
		return
	}
	b.stream(r.Context(), c)
}

// stream writes c's outbox as entries arrive, and catches c up from the
// stream when it fell behind, until c is gone.
func (b *broker) stream(ctx context.Context, c *client) {
	for {
		// The broadcast before the outbox, so that no wake-up is lost.
		var tick <-chan struct{}
		if bc := c.tick.Load(); bc != nil {
			tick = bc.C()
		}
		behind, cursor, ended, err := c.drain()
		if err != nil || ended {
			return
		}
		if behind {
			if !b.catchUp(c, cursor) {
				return
			}
			continue // back in the fan-out: its group's broadcast
		}
		select {
		case <-ctx.Done():
			return
		case <-c.out.wake:
		case <-tick:
		}
	}
}

// leave takes c out of the live fan-out (mu held).
func (b *broker) leave(c *client) {
	if !c.joined {
		return
	}
	c.joined = false
	c.tick.Store(nil)
	if g := b.groups[c.sub.key]; g != nil {
		delete(g.clients, c)
		if len(g.clients) == 0 {
			delete(b.groups, c.sub.key)
			delete(b.fresh, c.sub.key)
			b.subsGen++
		}
	}
}

// join sends the client its start: a snapshot (or, resuming, what it
// missed; or reset and a snapshot when that is gone), then catches up with
// the stream and enters the live fan-out with no gap and no duplicate.
// Later, whenever a burst fills the client's outbox, the fan-out leaves it
// out and its handler catches it up again from the stream at its own pace
// (fellBehind); it is dropped only when it falls more than MaxLag entries
// behind. False when the client is gone.
func (b *broker) join(c *client, p plan) bool {
	ctx, release, ok := b.reading(c)
	if !ok {
		return false
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		release()
		return false
	}
	cursor, err := b.begin(ctx, c, p)
	release()
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, errGone) {
			b.log.Warn("events: start a client", "client", c.id, "err", err)
		}
		return false
	}
	return b.catchUp(c, cursor)
}

// catchUp sends c the matching entries after cursor from the stream, then
// puts it into the live fan-out (true), unless it is gone (false).
func (b *broker) catchUp(c *client, cursor streamID) bool {
	ctx, release, ok := b.reading(c)
	if !ok {
		return false
	}
	defer release()
	rdb, key := b.store.Client(), b.store.Keys().Events()
	fail := func(err error) bool {
		if ctx.Err() == nil && !errors.Is(err, errGone) {
			b.log.Warn("events: catch up a client", "client", c.id, "err", err)
		}
		b.mu.Lock()
		c.drop()
		b.mu.Unlock()
		return false
	}
	for {
		// What the outbox holds comes before cursor.
		if _, _, _, err := c.drain(); err != nil {
			return fail(err)
		}
		// Outside the lock, a page at a time, written to the client
		// directly (it only delays this client).
		for range 64 {
			b.mu.Lock()
			if cursor.cmp(b.pos) >= 0 {
				ok := b.enter(c, cursor)
				b.mu.Unlock()
				return ok
			}
			b.mu.Unlock()
			next, n, err := b.replay(ctx, rdb, key, c, cursor, replayPage, false)
			if err != nil {
				return fail(err)
			}
			cursor = next
			if n == 0 {
				break // what lies between was trimmed meanwhile; nothing to send
			}
		}
		// The last stretch under the lock, so that no entry slips between
		// the catch-up and the fan-out; into the outbox, as the fan-out
		// does. A full outbox means another round.
		b.mu.Lock()
		if cursor.cmp(b.pos) < 0 {
			next, _, err := b.replay(ctx, rdb, key, c, cursor, 0, true)
			cursor = next
			if errors.Is(err, errFull) {
				b.mu.Unlock()
				continue
			}
			if err != nil {
				b.mu.Unlock()
				return fail(err)
			}
		}
		ok := b.enter(c, cursor)
		b.mu.Unlock()
		return ok
	}
}

// errFull is replay's answer when the client's outbox is full.
var errFull = errors.New("the client's outbox is full")

// enter adds c to the live fan-out from cursor on (mu held); false when c
// is gone.
func (b *broker) enter(c *client, cursor streamID) bool {
	if b.clients[c.id] != c || b.closed || c.ended {
		return false
	}
	delete(b.catching, c)
	c.joined, c.from, c.last = true, cursor, cursor
	g := b.groups[c.sub.key]
	if g == nil {
		g = &group{sub: c.sub, clients: map[*client]struct{}{}, tick: newBroadcast()}
		b.groups[c.sub.key] = g
		b.fresh[c.sub.key] = g
		b.subsGen++
	}
	g.clients[c] = struct{}{}
	c.tick.Store(g.tick)
	return true
}

// fellBehind takes c out of the live fan-out when its outbox is full (mu
// held): its handler, once it has written the outbox, catches it up from
// the stream, after the last entry it was given.
func (b *broker) fellBehind(c *client) {
	b.leave(c)
	b.catching[c] = struct{}{}
	c.seq = b.seq - 1 // behind by the entry that did not fit
	c.out.fellBehind(c.last)
}

// replay sends c the matching entries after cursor (at most count; 0 =
// all up to the broker's position) and returns the id of the last entry it
// is done with and how many entries it read. Without try it writes them to
// the client and flushes; with try (mu is held) it queues them in the
// outbox, and a full outbox ends it with errFull.
func (b *broker) replay(ctx context.Context, rdb redis.UniversalClient, key string, c *client, cursor streamID, count int64, try bool) (streamID, int, error) {
	start := "(" + cursor.String()
	var msgs []redis.XMessage
	var err error
	if count > 0 {
		msgs, err = rdb.XRangeN(ctx, key, start, "+", count).Result()
	} else {
		msgs, err = rdb.XRange(ctx, key, start, b.pos.String()).Result()
	}
	if err != nil {
		return cursor, 0, err
	}
	done := 0
	defer func() {
		// Entries behind it are counted from the broker's entry count.
		if !try {
			b.mu.Lock()
			defer b.mu.Unlock()
		}
		c.seq += int64(done)
	}()
	wrote := false
	for _, m := range msgs {
		if e, ok := toEntry(m); ok && c.sub.match(e.topic) {
			if try {
				if !c.out.try(e.frame) {
					return cursor, len(msgs), errFull
				}
			} else if err := c.write(e.frame); err != nil {
				return cursor, len(msgs), err
			} else {
				wrote = true
			}
		}
		if id, ok := parseStreamID(m.ID); ok {
			cursor = id
		}
		done++
	}
	if wrote {
		if err := c.flush(); err != nil {
			return cursor, len(msgs), err
		}
	}
	return cursor, len(msgs), nil
}

// plan decides, before the response starts, where a client's catch-up
// begins, so that every change written after it saw the response reaches
// it: after lastID when the stream still holds everything after it; else
// (no lastID, or one that is unknown or trimmed) at the stream's end as it
// is now, with a fresh snapshot (after a reset event when the client asked
// to resume).
type plan struct {
	cursor   streamID
	snapshot bool
	reset    string // why lastID cannot be resumed from
	lastID   string
}

func (b *broker) plan(ctx context.Context, lastID string) (plan, error) {
	rdb, key := b.store.Client(), b.store.Keys().Events()
	p := plan{lastID: lastID, snapshot: true}
	if lastID != "" {
		from, ok := parseStreamID(lastID)
		if !ok {
			p.reset = "Last-Event-ID is not a stream id"
		} else {
			pipe := rdb.Pipeline()
			first := pipe.XRangeN(ctx, key, "-", "+", 1)
			last := pipe.XRevRangeN(ctx, key, "+", "-", 1)
			if _, err := pipe.Exec(ctx); err != nil {
				return p, err
			}
			switch f, l := first.Val(), last.Val(); {
			case len(l) == 0 && from == zeroID:
				return plan{cursor: from}, nil
			case len(l) == 0:
				p.reset = "the event stream is empty (Redis lost its data?)"
			case from.cmp(mustID(l[0].ID)) > 0:
				p.reset = "Last-Event-ID is newer than the stream's last event (another Redis?)"
			case from.cmp(mustID(f[0].ID)) < 0:
				p.reset = "events after Last-Event-ID were trimmed from the stream"
			default:
				return plan{cursor: from}, nil
			}
		}
	}
	var err error
	p.cursor, err = lastEntry(ctx, rdb, key)
	return p, err
}

// begin sends what comes before the catch-up: the reset event and the
// snapshot, if the plan has them, and returns where the catch-up starts:
// the plan's cursor, or the snapshot's (which it holds the effects of).
func (b *broker) begin(ctx context.Context, c *client, p plan) (streamID, error) {
	if !p.snapshot {
		return p.cursor, nil
	}
	f, err := b.sharedSnapshot(ctx, c.sub)
	if err != nil {
		return p.cursor, err
	}
	if p.reset != "" {
		data, _ := json.Marshal(ResetData{LastEventID: truncate(p.lastID, 64), Reason: p.reset})
		ev, _ := json.Marshal(health.Event{Type: health.EventReset, Timestamp: b.clock.Now().UnixMilli(), Data: data})
		if err := c.write(sseFrame(f.cursor.String(), health.EventReset, ev)); err != nil {
			return p.cursor, err
		}
	}
	for _, fr := range f.frames {
		if err := c.write(fr); err != nil {
			return p.cursor, err
		}
	}
	return f.cursor, c.flush()
}

// ResetData is the payload of a reset event: the client's Last-Event-ID
// could not be resumed from, and a fresh snapshot follows.
type ResetData struct {
	LastEventID string `json:"last_event_id" doc:"The id the client asked to resume from"`
	Reason      string `json:"reason" example:"events after Last-Event-ID were trimmed from the stream" doc:"Why it cannot be resumed from"`
}
