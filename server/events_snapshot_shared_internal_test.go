package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// TestSharedSnapshotReadAfterCall: clients of one pattern set that ask for
// a snapshot while a read is under way do not get that read (it may have
// begun before their cursor): they share the next one, which begins once
// it ends. One read serves them all.
func TestSharedSnapshotReadAfterCall(t *testing.T) {
	started := make(chan int, 10)
	release := make(chan struct{}, 10)
	reads := 0
	snapshot := func(ctx context.Context, _ subscription) ([]health.Event, error) {
		reads++ // reads of one pattern set never overlap
		n := reads
		started <- n
		<-release
		data, _ := json.Marshal(n)
		return []health.Event{{Topic: "system:health", Timestamp: 1, Data: data}}, nil
	}
	b := newBroker(SSEConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, snapshot, nil)
	defer b.cancel()
	waiting := make(chan struct{}, 10)
	b.onSnapWait = func() { waiting <- struct{}{} }
	sub, err := parseSubscription([]string{"system:health"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		frames [][]byte
		err    error
	}
	ask := func() chan result {
		ch := make(chan result, 1)
		go func() {
			f, err := b.sharedSnapshot(context.Background(), sub)
			ch <- result{f, err}
		}()
		return ch
	}
	wait := func(ch chan int) int {
		t.Helper()
		select {
		case n := <-ch:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no snapshot read began")
		}
		return 0
	}
	first := ask()
	<-waiting
	if n := wait(started); n != 1 {
		t.Fatalf("read %d began, want 1", n)
	}
	// Two more ask while read 1 is under way.
	later := []chan result{ask(), ask()}
	for range later {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("a later client did not ask")
		}
	}
	b.mu.Lock()
	if slot := b.snaps[sub.key]; slot == nil || slot.next == nil || slot.next.waiters != 2 {
		t.Fatalf("not two clients waiting for the next read: %+v", slot)
	}
	b.mu.Unlock()
	release <- struct{}{}
	if r := <-first; r.err != nil || len(r.frames) != 1 || !json.Valid(r.frames[0]) {
		t.Fatalf("first: %v %q", r.err, r.frames)
	}
	if n := wait(started); n != 2 {
		t.Fatalf("read %d began, want 2", n)
	}
	release <- struct{}{}
	for i, ch := range later {
		r := <-ch
		if r.err != nil || len(r.frames) != 1 {
			t.Fatalf("later %d: %v %q", i, r.err, r.frames)
		}
		var e health.Event
		if err := json.Unmarshal(r.frames[0], &e); err != nil || string(e.Data) != "2" || e.Type != health.EventSnapshot {
			t.Fatalf("later %d got %s, want read 2's snapshot event", i, r.frames[0])
		}
	}
	select {
	case n := <-started:
		t.Fatalf("read %d began: the two later clients did not share one", n)
	default:
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2", reads)
	}
}
