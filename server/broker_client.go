package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/r3labs/sse/v2"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// replayPage is how many stream entries a catch-up reads at a time.
const replayPage = 500

// client is one connection to GET /api/v1/events.
type client struct {
	id     string // its own sse stream
	sub    subscription
	remote string
	cancel context.CancelFunc
	rc     *http.ResponseController
	// subscribedCh is closed once r3labs/sse has registered the
	// connection's subscriber: nothing published before reaches it.
	subscribedCh chan struct{}
	subOnce      sync.Once
	dropOnce     sync.Once

	// ctx is the connection's; wg counts its goroutines besides the
	// handler (the join, then each catch-up).
	ctx context.Context
	wg  sync.WaitGroup

	// Under the broker's mu. joined: in the live fan-out, where entries up
	// to from reached it through its own catch-up, and last is the last one
	// queued for it. seq: while it catches up, the broker's entry count at
	// its position (its lag is the broker's count minus seq).
	joined bool
	from   streamID
	last   streamID
	seq    int64
}

// drop ends the connection: its context ends (r3labs/sse then removes the
// subscriber and its handler returns) and a write stuck on a client that
// does not read fails at once.
func (c *client) drop() {
	c.dropOnce.Do(func() {
		c.cancel()
		_ = c.rc.SetWriteDeadline(time.Now())
	})
}

// subscribed is r3labs/sse's OnSubscribe hook.
func (b *broker) subscribed(streamID string, _ *sse.Subscriber) {
	b.mu.Lock()
	found := b.clients[streamID]
	b.mu.Unlock()
	if found != nil {
		found.subOnce.Do(func() { close(found.subscribedCh) })
	}
}

// serve streams events to one client until it goes away, is dropped, or
// the broker closes. The caller has acquired a place for it. lastID is the
// Last-Event-ID it resumes from ("" for a fresh snapshot).
func (b *broker) serve(w http.ResponseWriter, r *http.Request, sub subscription, lastID, addr string) {
	defer b.release(addr)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &client{sub: sub, remote: r.RemoteAddr, cancel: cancel, rc: http.NewResponseController(w),
		subscribedCh: make(chan struct{})}
	// An event stream outlives any server-wide write timeout.
	_ = c.rc.SetWriteDeadline(time.Time{})
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
	b.clients[c.id] = c
	b.catching[c] = struct{}{}
	c.seq = b.seq
	b.mu.Unlock()
	b.sse.CreateStream(c.id)

	c.ctx = ctx
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.join(ctx, c, p)
	}()
	// Returns once ctx ends: r3labs/sse deregisters the subscriber, which
	// closes its channel. Its stream is removed only after that, or one of
	// its goroutines would wait forever to deregister.
	b.sse.ServeHTTP(w, sseRequest(r.WithContext(ctx), c.id))
	cancel()
	b.mu.Lock()
	b.leave(c)
	delete(b.clients, c.id)
	delete(b.catching, c)
	b.mu.Unlock()
	b.sse.RemoveStream(c.id) // ends a Publish of join that waits for room
	c.wg.Wait()
}

// sseRequest is r as r3labs/sse expects it: its stream named in the query,
// and no Last-Event-ID (it wants a number; ours are stream ids, handled by
// join).
func sseRequest(r *http.Request, stream string) *http.Request {
	u := *r.URL
	u.RawQuery = url.Values{"stream": {stream}}.Encode()
	r.URL = &u
	r.Header = r.Header.Clone()
	r.Header.Del("Last-Event-ID")
	return r
}

// leave takes c out of the live fan-out (mu held).
func (b *broker) leave(c *client) {
	if !c.joined {
		return
	}
	c.joined = false
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
// Later, whenever a burst fills the client's buffer, the fan-out leaves it
// out and it catches up again from the stream at its own pace (fellBehind);
// it is dropped only when it falls more than MaxLag entries behind.
func (b *broker) join(ctx context.Context, c *client, p plan) {
	select {
	case <-c.subscribedCh:
	case <-ctx.Done():
		return
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		return
	}
	if err := b.begin(ctx, c, p); err != nil {
		if ctx.Err() == nil {
			b.log.Warn("events: start a client", "client", c.id, "err", err)
			c.drop()
		}
		return
	}
	b.catchUp(ctx, c, p.cursor)
}

// catchUp sends c the matching entries after cursor from the stream, then
// puts it into the live fan-out (true), unless it is gone (false).
func (b *broker) catchUp(ctx context.Context, c *client, cursor streamID) bool {
	rdb, key := b.store.Client(), b.store.Keys().Events()
	fail := func(err error) bool {
		if ctx.Err() == nil {
			b.log.Warn("events: catch up a client", "client", c.id, "err", err)
			c.drop()
		}
		return false
	}
	for {
		// Outside the lock, a page at a time, with a Publish that waits
		// for the client (it only delays this client).
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
		// the catch-up and the fan-out; TryPublish, as the fan-out does. A
		// full buffer means another round.
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
		ok := ctx.Err() == nil && b.enter(c, cursor)
		b.mu.Unlock()
		return ok
	}
}

// errFull is replay's answer when the client's buffer is full.
var errFull = errors.New("the client's buffer is full")

// enter adds c to the live fan-out from cursor on (mu held); false when c
// is gone.
func (b *broker) enter(c *client, cursor streamID) bool {
	if b.clients[c.id] != c || b.closed {
		return false
	}
	delete(b.catching, c)
	c.joined, c.from, c.last = true, cursor, cursor
	g := b.groups[c.sub.key]
	if g == nil {
		g = &group{sub: c.sub, clients: map[*client]struct{}{}}
		b.groups[c.sub.key] = g
		b.fresh[c.sub.key] = g
		b.subsGen++
	}
	g.clients[c] = struct{}{}
	return true
}

// fellBehind takes c out of the live fan-out when its buffer is full (mu
// held): a goroutine of its own catches it up from the stream, after the
// last entry it was given. (serve waits for it: this happens only while c
// is in the fan-out, before serve takes it out.)
func (b *broker) fellBehind(c *client) {
	b.leave(c)
	b.catching[c] = struct{}{}
	c.seq = b.seq - 1 // behind by the entry that did not fit
	cursor := c.last
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.catchUp(c.ctx, c, cursor)
	}()
}

// replay sends c the matching events after cursor (from at most count
// entries; 0 = all up to the broker's position) and returns the id of the
// last event it is done with and how many entries it read. With try (mu
// is held) it does not wait: a full buffer ends it with errFull. From the
// id of an entry's own event it reads that entry again: its also event
// may be due.
func (b *broker) replay(ctx context.Context, rdb redis.UniversalClient, key string, c *client, cursor streamID, count int64, try bool) (streamID, int, error) {
	start := "(" + cursor.entry()
	if cursor.n == 0 {
		start = cursor.entry()
	}
	var msgs []redis.XMessage
	var err error
	if count > 0 {
		msgs, err = rdb.XRangeN(ctx, key, start, "+", count).Result()
	} else {
		msgs, err = rdb.XRange(ctx, key, start, b.pos.entry()).Result()
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
				if try {
					if !b.sse.TryPublish(c.id, e.ev) {
						return cursor, len(msgs), errFull
					}
				} else if !b.publish(ctx, c, e.ev) {
					return cursor, len(msgs), ctx.Err()
				}
			}
			cursor = e.id
			if !e.also {
				done++ // entries are counted by their own event
			}
		}
	}
	return cursor, len(msgs), nil
}

// publish sends ev to c, waiting for room; false once c is gone.
func (b *broker) publish(ctx context.Context, c *client, ev *sse.Event) bool {
	if ctx.Err() != nil {
		return false
	}
	b.sse.Publish(c.id, ev) // returns when queued, or when the stream is removed
	return ctx.Err() == nil
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

// begin sends what comes before the catch-up: the reset event and the
// snapshot, if the plan has them, with the cursor's id.
func (b *broker) begin(ctx context.Context, c *client, p plan) error {
	if !p.snapshot {
		return nil
	}
	id := []byte(p.cursor.String())
	now := b.clock.Now().UnixMilli()
	if p.reset != "" {
		data, _ := json.Marshal(ResetData{LastEventID: truncate(p.lastID, 64), Reason: p.reset})
		ev, _ := json.Marshal(health.Event{Type: health.EventReset, Timestamp: now, Data: data})
		if !b.publish(ctx, c, &sse.Event{ID: id, Event: []byte(health.EventReset), Data: ev}) {
			return ctx.Err()
		}
	}
	events, err := b.snapshot(ctx, c.sub)
	if err != nil {
		return err
	}
	for _, e := range events {
		e.Type = health.EventSnapshot
		if e.Timestamp == 0 {
			e.Timestamp = now
		}
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if !b.publish(ctx, c, &sse.Event{ID: id, Event: []byte(health.EventSnapshot), Data: data}) {
			return ctx.Err()
		}
	}
	return nil
}

// ResetData is the payload of a reset event: the client's Last-Event-ID
// could not be resumed from, and a fresh snapshot follows.
type ResetData struct {
	LastEventID string `json:"last_event_id" doc:"The id the client asked to resume from"`
	Reason      string `json:"reason" example:"events after Last-Event-ID were trimmed from the stream" doc:"Why it cannot be resumed from"`
}
