package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"
	"time"
)

// r3labsFrame writes an event as r3labs/sse's loop does: a line at a time,
// then a flush.
func r3labsFrame(w *sseWriter, id, data string) {
	fmt.Fprintf(w, "id: %s\n", id)
	fmt.Fprintf(w, "data: %s\n", data)
	fmt.Fprintf(w, "event: %s\n", "t")
	fmt.Fprint(w, "\n")
	w.Flush()
}

// TestSSEWriterPassThrough: a joined writer skips the frames up to the end
// of the catch-up, writes the next ones, and from then on passes frames
// through unparsed, counting each as progress, busy only while a write is
// under way;
// dropped, even in the middle of a frame, it writes nothing more.
func TestSSEWriterPassThrough(t *testing.T) {
	rec := httptest.NewRecorder()
	var w sseWriter
	w.init(rec, http.NewResponseController(rec), nil, nil)
	w.WriteHeader(http.StatusOK)
	w.Flush()
	r3labsFrame(&w, "1-0", "held")
	if h, _ := w.take(); len(h) != 1 {
		t.Fatalf("held %d frames, want 1", len(h))
	}
	if !w.release(streamID{ms: 2}) {
		t.Fatal("release refused")
	}
	r3labsFrame(&w, "2-0", "caught up") // sent by the catch-up
	if w.pass || rec.Body.Len() != 0 {
		t.Fatalf("a frame up to the catch-up's end was written (pass %v): %q", w.pass, rec.Body)
	}
	r3labsFrame(&w, "3-0", "a")
	if !w.pass {
		t.Fatal("not passing frames through after the first one past the catch-up")
	}
	r3labsFrame(&w, "2-5", "b") // no longer compared: the stream is in order
	want := "id: 3-0\ndata: a\nevent: t\n\nid: 2-5\ndata: b\nevent: t\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	if p := w.progress.Load(); p != 2 || w.busy.Load() {
		t.Fatalf("progress %d busy %v, want 2 and idle", p, w.busy.Load())
	}
	// Dropped between a frame's lines: the rest of it and every later
	// frame go nowhere.
	fmt.Fprintf(&w, "id: %s\n", "4-0")
	if w.busy.Load() {
		t.Fatal("busy between two lines of a frame: the watchdog would take a handler waiting for the processor for a stuck one")
	}
	w.drop()
	fmt.Fprintf(&w, "data: %s\n", "c")
	fmt.Fprint(&w, "\n")
	w.Flush()
	r3labsFrame(&w, "5-0", "d")
	if got := strings.TrimPrefix(rec.Body.String(), want); got != "id: 4-0\n" {
		t.Fatalf("after the drop: %q, want only the line written before it", got)
	}
	if w.busy.Load() || w.progress.Load() != 2 {
		t.Fatalf("dropped: busy %v progress %d", w.busy.Load(), w.progress.Load())
	}
}

// countingConn counts the writes to a connection.
type countingConn struct {
	net.Conn
	writes int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	return c.Conn.Write(p)
}

// TestSSEWriterTakenConnection: on a connection taken from net/http the
// writer sends HTTP/1.1 chunks that a chunked reader decodes to exactly
// what was written, one write to the connection per live frame, a large
// write in one chunk, and the last chunk at the end; a write that fails
// closes the connection and fails the writes after it.
func TestSSEWriterTakenConnection(t *testing.T) {
	server, client := net.Pipe()
	conn := &countingConn{Conn: server}
	var w sseWriter
	ended := false
	w.init(nil, nil, conn, func() { ended = true })
	w.WriteHeader(http.StatusOK)
	w.Flush()
	if !w.release(zeroID) {
		t.Fatal("release refused with nothing held")
	}
	read := make(chan string, 1)
	go func() {
		b, err := io.ReadAll(httputil.NewChunkedReader(client))
		if err != nil {
			read <- "error: " + err.Error()
			return
		}
		read <- string(b)
	}()

	r3labsFrame(&w, "1-0", "one")
	r3labsFrame(&w, "2-0", "two")
	big := strings.Repeat("x", 3*chunkMax)
	if _, err := fmt.Fprint(sink{&w}, big); err != nil {
		t.Fatal(err)
	}
	if err := w.send(); err != nil {
		t.Fatal(err)
	}
	if err := w.send(); err != nil { // nothing gathered: nothing sent
		t.Fatal(err)
	}
	if cap(w.out) > 2*chunkMax {
		t.Errorf("kept %d bytes of room after a large write", cap(w.out))
	}
	w.end()

	want := "id: 1-0\ndata: one\nevent: t\n\nid: 2-0\ndata: two\nevent: t\n\n" + big
	select {
	case got := <-read:
		if got != want {
			t.Fatalf("decoded %d bytes %.80q..., want %d bytes %.80q...", len(got), got, len(want), want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not see the last chunk")
	}
	// Two frames, the large write, the last chunk.
	if conn.writes != 4 {
		t.Errorf("%d writes to the connection, want 4", conn.writes)
	}

	// A failed write: the connection is closed, the client ended, later
	// writes fail.
	if ended {
		t.Fatal("the client ended before a write failed")
	}
	if _, err := w.put([]byte("late")); err == nil {
		if err := w.send(); err == nil {
			t.Fatal("a write on a closed connection succeeded")
		}
	}
	if !ended {
		t.Error("a failed write did not end the client")
	}
	if _, err := w.put([]byte("later")); err == nil {
		t.Fatal("a write after a failed one succeeded")
	}
}

// panicConn is a connection whose writes panic: a stand-in for a defect
// of the writer's own.
type panicConn struct{ net.Conn }

func (panicConn) Write([]byte) (int, error) { panic("a write that panics") }

// TestSSEWriterPanicEndsItsClientOnly: a panic in the writer, under
// r3labs/sse's loop, ends its client (discarding its frames from then on)
// and does not leave the loop: a loop ended by a panic stops reading the
// subscriber's channel, and the stream's loop, blocked on it once full,
// held up every client of the pattern set, the broker's reader and Close.
func TestSSEWriterPanicEndsItsClientOnly(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	var w sseWriter
	ended := false
	w.init(nil, nil, panicConn{server}, func() { ended = true })
	w.WriteHeader(http.StatusOK)
	w.Flush()
	if !w.release(zeroID) {
		t.Fatal("release refused with nothing held")
	}
	r3labsFrame(&w, "1-0", "one") // its write panics
	p := w.panicked.Load()
	if p == nil || p.v != "a write that panics" || !strings.Contains(string(p.stack), "panicConn") {
		t.Fatalf("the panic was not kept for the broker's log: %+v", p)
	}
	if !ended || w.mode.Load() != modeDropped {
		t.Fatalf("after a panic: client ended %v, mode %d; want ended and dropped", ended, w.mode.Load())
	}
	r3labsFrame(&w, "2-0", "two") // discarded: nothing written, no panic
	w.end()
}
