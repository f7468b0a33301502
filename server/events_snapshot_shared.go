package server

import (
	"context"
	"encoding/json"

	"github.com/vigil-dev/vigil/health"
)

// snapRead is one read of a pattern set's snapshot, rendered once (the data
// of each snapshot event) and shared by the clients that wait for it.
type snapRead struct {
	done   chan struct{}
	frames [][]byte
	err    error
	// waiters counts the clients that wait for it (under the broker's
	// mu).
	waiters int
}

// snapSlot is the reads of one pattern set: the one under way, and the
// next, which starts once it is done.
type snapSlot struct {
	running, next *snapRead
}

// sharedSnapshot returns the snapshot of sub, rendered, read after the
// call began (a client's snapshot must be read after its cursor): clients
// of one pattern set that connect together share one read. A read under
// way when it is called started too early: it waits for the next one.
func (b *broker) sharedSnapshot(ctx context.Context, sub subscription) ([][]byte, error) {
	b.mu.Lock()
	slot := b.snaps[sub.key]
	if slot == nil {
		slot = &snapSlot{}
		b.snaps[sub.key] = slot
	}
	var r *snapRead
	lead := false
	var wait chan struct{}
	switch {
	case slot.next != nil:
		r = slot.next
		r.waiters++
	case slot.running != nil:
		r = &snapRead{done: make(chan struct{}), waiters: 1}
		slot.next, wait, lead = r, slot.running.done, true
	default:
		r = &snapRead{done: make(chan struct{}), waiters: 1}
		slot.running, lead = r, true
	}
	if b.onSnapWait != nil {
		b.onSnapWait()
	}
	b.mu.Unlock()
	if lead {
		if wait != nil {
			<-wait // the read before ends whatever the clients do
			b.mu.Lock()
			slot.running, slot.next = r, nil
			b.mu.Unlock()
		}
		// The broker's context: the clients waiting for it may outlive
		// the one that leads it.
		r.frames, r.err = b.renderSnapshot(b.ctx, sub)
		b.mu.Lock()
		if slot.running == r {
			slot.running = nil
		}
		if slot.running == nil && slot.next == nil {
			delete(b.snaps, sub.key)
		}
		b.mu.Unlock()
		close(r.done)
	}
	select {
	case <-r.done:
		return r.frames, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// renderSnapshot reads sub's snapshot and renders each event's data.
func (b *broker) renderSnapshot(ctx context.Context, sub subscription) ([][]byte, error) {
	events, err := b.snapshot(ctx, sub)
	if err != nil {
		return nil, err
	}
	now := b.clock.Now().UnixMilli()
	frames := make([][]byte, 0, len(events))
	for _, e := range events {
		e.Type = health.EventSnapshot
		if e.Timestamp == 0 {
			e.Timestamp = now
		}
		data, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		frames = append(frames, data)
	}
	return frames, nil
}
