package server

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// TestSharedEndsReadAfterCall: clients that connect while a read of the
// stream's ends is under way do not get that read (it may have begun
// before their request, so that their cursor would be older than it, or
// their Last-Event-ID judged newer than the stream): they share the next
// one, which begins once it ends. One read serves them all.
func TestSharedEndsReadAfterCall(t *testing.T) {
	started := make(chan int, 10)
	release := make(chan struct{}, 10)
	reads := 0
	b := newBroker(SSEConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, nil, nil)
	defer b.cancel()
	b.readEnds = func(context.Context) (streamEnds, error) {
		reads++ // reads never overlap
		n := reads
		started <- n
		<-release
		return streamEnds{any: true, first: streamID{ms: 1}, last: streamID{ms: uint64(n)}}, nil
	}
	waiting := make(chan struct{}, 10)
	b.onEndsWait = func() { waiting <- struct{}{} }
	type result struct {
		e   streamEnds
		err error
	}
	ask := func() chan result {
		ch := make(chan result, 1)
		go func() {
			e, err := b.sharedEnds(context.Background())
			ch <- result{e, err}
		}()
		return ch
	}
	wait := func(ch chan int) int {
		t.Helper()
		select {
		case n := <-ch:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no read began")
		}
		return 0
	}
	first := ask()
	<-waiting
	if n := wait(started); n != 1 {
		t.Fatalf("read %d began, want 1", n)
	}
	later := []chan result{ask(), ask()}
	for range later {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("a later client did not ask")
		}
	}
	release <- struct{}{}
	if r := <-first; r.err != nil || r.e.last.ms != 1 {
		t.Fatalf("first: %+v %v, want read 1's", r.e, r.err)
	}
	if n := wait(started); n != 2 {
		t.Fatalf("read %d began, want 2", n)
	}
	release <- struct{}{}
	for i, ch := range later {
		if r := <-ch; r.err != nil || r.e.last.ms != 2 {
			t.Fatalf("later %d: %+v %v, want read 2's", i, r.e, r.err)
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

// TestPlanFromEnds: where a client's catch-up begins, for each kind of
// Last-Event-ID, from the stream's ends.
func TestPlanFromEnds(t *testing.T) {
	ends := streamEnds{any: true, first: streamID{ms: 10, seq: 0}, last: streamID{ms: 20, seq: 1, n: 1}}
	for _, tc := range []struct {
		last     string
		e        streamEnds
		cursor   streamID
		snapshot bool
		reset    bool
	}{
		{"", ends, ends.last, true, false},
		{"", streamEnds{}, zeroID, true, false},
		{"15-0", ends, streamID{ms: 15}, false, false},
		{"20-1.1", ends, streamID{ms: 20, seq: 1, n: 1}, false, false},
		{"10-0", ends, streamID{ms: 10}, false, false},
		{"9-0", ends, ends.last, true, true},  // trimmed
		{"21-0", ends, ends.last, true, true}, // newer than the stream
		{"junk", ends, ends.last, true, true}, // not an id
		{"0-0", streamEnds{}, zeroID, false, false},
		{"5-0", streamEnds{}, zeroID, true, true}, // the stream is empty
	} {
		p := plan(tc.last, tc.e)
		if p.cursor != tc.cursor || p.snapshot != tc.snapshot || (p.reset != "") != tc.reset {
			t.Errorf("plan(%q, %+v) = %+v, want cursor %v snapshot %v reset %v", tc.last, tc.e, p, tc.cursor, tc.snapshot, tc.reset)
		}
	}
}
