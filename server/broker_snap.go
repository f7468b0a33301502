package server

import (
	"context"
	"encoding/json"

	"github.com/vigil-dev/vigil/health"
)

// snapFlight is one read of the snapshot of a pattern set, shared by every
// client of that set that asked for one before the read began: a burst of
// clients (a dashboard's users after a restart) costs a few reads, not one
// each, and they share the framed messages. A read begins only when the
// previous one of the same set has ended, so a client waits at most for
// two. What one client gets is as fresh as if it had read alone: the read
// began after the client asked (its cursor, the stream's last entry, is
// read first, so the snapshot holds the effects of every entry up to it).
type snapFlight struct {
	done   chan struct{}
	prev   *snapFlight // the read this one waits for before it begins
	cursor streamID
	frames [][]byte // the snapshot messages, with the cursor's id
	err    error
}

// sharedSnapshot returns a snapshot for sub read after this call began,
// or the context's error.
func (b *broker) sharedSnapshot(ctx context.Context, sub subscription) (*snapFlight, error) {
	for {
		b.snapMu.Lock()
		f, lead := b.snapNext[sub.key], false
		if f == nil {
			f, lead = &snapFlight{done: make(chan struct{}), prev: b.snapLast[sub.key]}, true
			b.snapNext[sub.key] = f
		}
		b.snapMu.Unlock()
		if lead {
			b.runSnapshot(ctx, sub, f)
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil && ctx.Err() == nil && (f.err == context.Canceled || f.err == context.DeadlineExceeded) {
			continue // its leader left; read again
		}
		return f, f.err
	}
}

// runSnapshot waits for the previous read of the set (clients asking
// meanwhile join f), then reads f under ctx, the leader's.
func (b *broker) runSnapshot(ctx context.Context, sub subscription, f *snapFlight) {
	defer close(f.done)
	if f.prev != nil {
		select {
		case <-f.prev.done:
		case <-ctx.Done():
			b.snapMu.Lock()
			if b.snapNext[sub.key] == f {
				delete(b.snapNext, sub.key)
			}
			b.snapMu.Unlock()
			f.err = ctx.Err()
			return
		}
	}
	b.snapMu.Lock()
	if b.snapNext[sub.key] == f {
		delete(b.snapNext, sub.key)
	}
	b.snapLast[sub.key] = f
	b.snapMu.Unlock()
	defer func() {
		b.snapMu.Lock()
		if b.snapLast[sub.key] == f {
			delete(b.snapLast, sub.key)
		}
		b.snapMu.Unlock()
	}()
	f.cursor, f.err = lastEntry(ctx, b.store.Client(), b.store.Keys().Events())
	if f.err != nil {
		return
	}
	events, err := b.snapshot(ctx, sub)
	if err != nil {
		f.err = err
		return
	}
	id := f.cursor.String()
	now := b.clock.Now().UnixMilli()
	f.frames = make([][]byte, 0, len(events))
	for _, e := range events {
		e.Type = health.EventSnapshot
		if e.Timestamp == 0 {
			e.Timestamp = now
		}
		data, err := json.Marshal(e)
		if err != nil {
			f.err = err
			return
		}
		f.frames = append(f.frames, sseFrame(id, health.EventSnapshot, data))
	}
}
