package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/r3labs/sse/v2"

	"github.com/vigil-dev/vigil/health"
)

// replayPage is how many stream entries a catch-up reads at a time.
const replayPage = 500

// client is one connection to GET /api/v1/events.
type client struct {
	id     string
	sub    subscription
	remote string
	cancel context.CancelFunc
	rc     *http.ResponseController
	// w is what r3labs/sse writes the group's stream through.
	w        *sseWriter
	g        *group
	dropOnce sync.Once

	// wg counts the join goroutine.
	wg sync.WaitGroup

	// Under the broker's mu. joined: caught up, its frames pass through.
	// While it catches up: seq, the broker's entry count when it connected,
	// and cursor, the last entry it had (broker.behind). seen: its
	// writer's progress at the watchdog's last look.
	joined bool
	seq    int64
	cursor streamID
	seen   uint64
}

// drop ends the connection: frames are no longer written, its context
// ends (r3labs/sse then removes the subscriber and its handler returns) and
// a write stuck on a client that does not read fails at once.
func (c *client) drop() {
	c.dropOnce.Do(func() {
		c.w.drop()
		c.cancel()
		_ = c.rc.SetWriteDeadline(time.Now())
	})
}

// serve streams events to one client until it goes away, is dropped, or
// the broker closes. The caller has acquired a place for it. lastID is the
// Last-Event-ID it resumes from ("" for a fresh snapshot).
//
// The client joins the r3labs/sse stream of its pattern set at once,
// through an sseWriter that holds the stream's frames while a goroutine of
// the client's writes its snapshot and catch-up; then only the held frames
// after the catch-up are written, and the rest pass through.
func (b *broker) serve(w http.ResponseWriter, r *http.Request, sub subscription, lastID, addr string) {
	defer b.release(addr)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rc := http.NewResponseController(w)
	c := &client{sub: sub, remote: r.RemoteAddr, cancel: cancel, rc: rc, w: newSSEWriter(w, rc)}
	// An event stream outlives any server-wide write timeout.
	_ = rc.SetWriteDeadline(time.Time{})
	p, err := b.plan(ctx, lastID)
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
	c.g = b.groupOf(sub)
	c.sub = c.g.sub // one copy per pattern set
	c.g.clients[c] = struct{}{}
	b.clients[c.id] = c
	b.catching[c] = struct{}{}
	c.seq, c.cursor = b.seq, p.cursor
	b.mu.Unlock()

	// The header r3labs/sse would write, written once, here.
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.join(ctx, c, p)
	}()
	// Returns once ctx ends and r3labs/sse has removed the subscriber.
	b.sse.ServeHTTP(c.w, sseRequest(r.WithContext(ctx), c.g.stream))
	cancel()
	c.wg.Wait()
	b.mu.Lock()
	gone := b.leave(c)
	delete(b.clients, c.id)
	delete(b.catching, c)
	close(b.left)
	b.left = make(chan struct{})
	b.mu.Unlock()
	if gone != "" {
		// No subscriber is left: none waits to deregister.
		b.sse.RemoveStream(gone)
	}
}

// groupOf returns the group of sub, made with its stream if it has none
// (mu held).
func (b *broker) groupOf(sub subscription) *group {
	g := b.groups[sub.key]
	if g == nil {
		b.nextID++
		g = &group{sub: sub, stream: "g" + strconv.FormatUint(b.nextID, 10), clients: map[*client]struct{}{}}
		b.sse.CreateStream(g.stream)
		b.groups[sub.key] = g
		b.fresh[sub.key] = g
		b.subsGen++
	}
	return g
}

// sseRequest is r as r3labs/sse expects it: its stream named in the query,
// and no Last-Event-ID (it wants a number; ours are stream ids, handled by
// join).
func sseRequest(r *http.Request, stream string) *http.Request {
	u := *r.URL
	u.RawQuery = url.Values{"stream": {stream}}.Encode()
	r.URL = &u
	if r.Header.Get("Last-Event-ID") != "" {
		r.Header = r.Header.Clone()
		r.Header.Del("Last-Event-ID")
	}
	return r
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
func (b *broker) join(ctx context.Context, c *client, p plan) {
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
	err := b.begin(ctx, c, p)
	if err == nil {
		err = b.catchUp(ctx, c, p.cursor)
	}
	if err != nil && ctx.Err() == nil {
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
					if _, err := c.w.w.Write(f.b); err != nil {
						return err
					}
					cursor, n = f.id, n+1
				}
			}
			if n > 0 {
				if err := c.rc.Flush(); err != nil {
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
				return nil
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
			if _, err := c.w.w.Write(buf.Bytes()); err != nil {
				return cursor, err
			}
			if err := c.rc.Flush(); err != nil {
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
			case from.cmp(endOf(l[0])) > 0:
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

// begin writes what comes before the catch-up: the reset event and the
// snapshot, if the plan has them, with the cursor's id.
func (b *broker) begin(ctx context.Context, c *client, p plan) error {
	if !p.snapshot {
		return nil
	}
	id := []byte(p.cursor.String())
	now := b.clock.Now().UnixMilli()
	var buf bytes.Buffer
	if p.reset != "" {
		data, _ := json.Marshal(ResetData{LastEventID: truncate(p.lastID, 64), Reason: p.reset})
		ev, _ := json.Marshal(health.Event{Type: health.EventReset, Timestamp: now, Data: data})
		appendFrame(&buf, &sse.Event{ID: id, Event: []byte(health.EventReset), Data: ev})
	}
	frames, err := b.sharedSnapshot(ctx, c.sub)
	if err != nil {
		return err
	}
	for _, data := range frames {
		appendFrame(&buf, &sse.Event{ID: id, Event: []byte(health.EventSnapshot), Data: data})
		if buf.Len() >= 32<<10 {
			if _, err := c.w.w.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	if _, err := c.w.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return c.rc.Flush()
}

// ResetData is the payload of a reset event: the client's Last-Event-ID
// could not be resumed from, and a fresh snapshot follows.
type ResetData struct {
	LastEventID string `json:"last_event_id" doc:"The id the client asked to resume from"`
	Reason      string `json:"reason" example:"events after Last-Event-ID were trimmed from the stream" doc:"Why it cannot be resumed from"`
}
