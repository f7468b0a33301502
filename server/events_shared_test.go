package server_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/server"
)

// waitStreams waits until the broker serves want pattern sets, each with
// its r3labs/sse stream, and returns their stream ids.
func waitStreams(tb testing.TB, srv *server.Server, want int) map[string]bool {
	tb.Helper()
	deadline := time.After(10 * time.Second)
	for {
		streams, left := server.EventStreams(srv)
		if len(streams) == want {
			for id, ok := range streams {
				if !ok {
					tb.Fatalf("group stream %s is not an r3labs/sse stream", id)
				}
			}
			return streams
		}
		select {
		case <-left:
		case <-deadline:
			tb.Fatalf("event streams: %v, want %d", streams, want)
		}
	}
}

// TestEventsSharedStream: clients with the same pattern set (in any order,
// repeated) share one r3labs/sse stream; another pattern set has its own;
// the stream goes with the last client of its pattern set.
func TestEventsSharedStream(t *testing.T) {
	h := newHarness(t, setup{})
	srv := h.h.(*server.Server)
	base := serveHTTP(t, srv)
	topic := h.id(0).Topic()
	a1 := subscribe(t, base, []string{topic, "host:*"}, "")
	a2 := subscribe(t, base, []string{"host:*", topic, topic}, "")
	b := subscribe(t, base, []string{"worker:*"}, "")
	streams := waitStreams(t, srv, 2)
	id := h.emit(topic, "shared")
	for _, c := range []*sseClient{a1, a2, b} {
		if m := c.next(); m.ID != id {
			t.Fatalf("got %+v, want id %s", m, id)
		}
	}
	a1.close()
	waitStreams(t, srv, 2)
	a2.close()
	left := waitStreams(t, srv, 1)
	for s := range streams {
		if !left[s] && server.StreamExists(srv, s) {
			t.Errorf("stream %s outlived its last client", s)
		}
	}
	id = h.emit(topic, "after")
	if m := b.next(); m.ID != id {
		t.Fatalf("got %+v, want id %s", m, id)
	}
}

// TestEventsJoinWhilePublishing: clients join (fresh, or resuming from an
// id already in the stream) while entries are being written in bursts;
// each gets, after its snapshot, exactly the matching entries after its
// start, once each and in order.
func TestEventsJoinWhilePublishing(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) {
		// Every entry it writes may be behind a joining client.
		c.SSE.MaxClientsPerAddress, c.SSE.MaxLag = 100, 20_000
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}})
	base := serveHTTP(t, h.h)
	topics := []string{h.id(0).Topic(), h.id(1).Topic()}
	filters := [][]string{{topics[0]}, {"worker:*"}, {topics[1], topics[0]}}
	key := h.store.Keys().Events()
	const maxBatches, per, joiners, each = 400, 10, 4, 10 // < 10,000 entries: none trimmed
	first := h.emit(topics[0], "first")

	// Entries are written in bursts until every client has joined.
	joinedAll := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range maxBatches {
			select {
			case <-joinedAll:
				return
			default:
			}
			pipe := h.redis.Client.Pipeline()
			for j := range per {
				pipe.XAdd(ctx(t), &redis.XAddArgs{Stream: key, Values: []string{"topic", topics[(i+j)%2], "type", "action",
					"data", fmt.Sprintf(`{"topic":%q,"type":"action","ts":1,"n":%d}`, topics[(i+j)%2], i*per+j)}})
			}
			if _, err := pipe.Exec(ctx(t)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	type joined struct {
		c      *sseClient
		filter []string
		resume string
	}
	var mu sync.Mutex
	var clients []joined
	var jg sync.WaitGroup
	for g := range joiners {
		jg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(g)))
			for i := range each {
				f := filters[(g+i)%len(filters)]
				resume := ""
				if rng.IntN(3) == 0 {
					resume = first
				}
				c := subscribe(t, base, f, resume)
				mu.Lock()
				clients = append(clients, joined{c, f, resume})
				mu.Unlock()
			}
		})
	}
	jg.Wait()
	close(joinedAll)
	wg.Wait()
	last := h.emit(topics[0], "last")
	all, err := h.redis.Client.XRange(ctx(t), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for n, j := range clients {
		// Its start: the snapshot's id, or the id it resumed from.
		start := j.resume
		var got []string
		for {
			m := j.c.next()
			if m.Event == "snapshot" {
				if start == "" || start == m.ID {
					start = m.ID
					continue
				}
				t.Fatalf("client %d: snapshot %s after deltas", n, m.ID)
			}
			got = append(got, m.ID)
			if m.ID == last {
				break
			}
		}
		if start == "" {
			// An empty snapshot: the first delta tells nothing; the
			// entries before it must simply not be missing after it.
			start = "0-0"
		}
		var want []string
		for _, e := range all {
			topic, _ := e.Values["topic"].(string)
			if idBefore(mustParseID(t, start), mustParseID(t, e.ID)) && matches(j.filter, topic) {
				want = append(want, e.ID)
			}
		}
		if start == "0-0" {
			for len(want) > 0 && len(got) > 0 && want[0] != got[0] {
				want = want[1:]
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("client %d (%v, resume %q, start %s): got %d entries\n%v\nwant %d\n%v", n, j.filter, j.resume, start, len(got), got, len(want), want)
		}
	}
	t.Logf("%d clients checked against %d entries", len(clients), len(all))
}

// matches is the test's own reading of the patterns used above.
func matches(filter []string, topic string) bool {
	for _, f := range filter {
		if f == topic || (f == "worker:*" && strings.HasPrefix(topic, "worker:")) {
			return true
		}
	}
	return false
}

// TestEventsStuckClientDropped: a client that does not read fills its
// socket, then r3labs/sse's channel of its subscriber, and its stream waits
// for it; the other pattern sets go on meanwhile, the watchdog disconnects
// it once its write has not moved for a whole period, and its stream's
// other clients then get every event, in order. (The watchdog's clock is
// fake: without the disconnection the reader of the same stream would
// never get the rest.)
func TestEventsStuckClientDropped(t *testing.T) {
	h := newHarness(t, setup{})
	srv := h.h.(*server.Server)
	fake := clock.NewFake(time.Now())
	server.SetWatchdogClock(srv, fake)
	base := serveHTTP(t, srv)
	topic := h.id(0).Topic()

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", topic, testToken)
	same := subscribe(t, base, []string{topic}, "")
	other := subscribe(t, base, []string{"worker:*"}, "")
	// The sleeper reads until it has a live event, then never again.
	mark := h.emit(topic, "mark")
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("sleeper: %v", err)
		}
		if strings.TrimSpace(line) == "id: "+mark {
			break
		}
	}
	for same.next().ID != mark {
	}
	for other.next().ID != mark {
	}

	pad := strings.Repeat("x", 64<<10)
	const n = 300 // 19 MB: more than the sleeper's socket buffers and its 64 frames
	ids := make([]string, n)
	for i := range n {
		ids[i] = h.emit(topic, pad)
	}
	// Another pattern set's stream does not wait.
	for i := range n {
		if m := other.next(); m.ID != ids[i] {
			t.Fatalf("other stream: event %d id %s, want %s", i, m.ID, ids[i])
		}
	}
	// Two looks: the sleeper's write has not moved between them.
	fake.Advance(server.StallCheck)
	fake.Advance(server.StallCheck)
	for i := range n {
		if m := same.next(); m.ID != ids[i] {
			t.Fatalf("same stream: event %d id %s, want %s", i, m.ID, ids[i])
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the client that does not read was not disconnected: %v", err)
	}
}

// farBehind is a client that resumes 300 entries of 64 KB (19 MB: more
// than its socket's buffers) behind, on a raw connection, with the
// broker's watchdog on a fake clock. It returns the client's connection,
// the server and the clock, and how many events it is behind.
func farBehind(t *testing.T) (conn net.Conn, srv *server.Server, fake *clock.Fake, n int) {
	t.Helper()
	h := newHarness(t, setup{})
	srv = h.h.(*server.Server)
	fake = clock.NewFake(time.Now())
	server.SetWatchdogClock(srv, fake)
	base := serveHTTP(t, srv)
	topic := h.id(0).Topic()
	pad := strings.Repeat("x", 64<<10)
	n = 300
	first := h.emit(topic, pad)
	for range n - 1 {
		h.emit(topic, pad)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nLast-Event-ID: %s\r\n\r\n", topic, testToken, first)
	return conn, srv, fake, n
}

// TestEventsStuckInItsStartDropped: a client that resumes far behind and
// never reads. Its catch-up fills the socket and its write blocks; the
// watchdog looked only at joined clients, so the client, its connection
// and its place stayed until Close. Two looks of the watchdog now drop it
// as they drop a joined client that does not read.
func TestEventsStuckInItsStartDropped(t *testing.T) {
	conn, srv, fake, _ := farBehind(t)
	// Its catch-up is under way and stuck: nothing more is written.
	deadline := time.After(10 * time.Second)
	for n, moved := server.Catching(srv); n != 1; n, moved = server.Catching(srv) {
		select {
		case <-moved:
		case <-deadline:
			t.Fatalf("%d clients catching up, want the sleeper", n)
		}
	}
	// One look of the watchdog at a time until it drops the client: it
	// reads the stream from Redis first, and only its stuck write counts.
	for n, moved := server.Catching(srv); n != 0; n, moved = server.Catching(srv) {
		fake.Advance(server.StallCheck)
		select {
		case <-moved:
		case <-time.After(100 * time.Millisecond): // the next look
		case <-deadline:
			t.Fatal("the client stuck in its catch-up is still there")
		}
	}
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the connection of the client stuck in its catch-up was not closed: %v", err)
	}
}

// TestEventsSlowReaderKeptInItsStart: a client that resumes far behind and
// reads slowly, 4 MB between two looks of the watchdog (2 MB/s), is not
// taken for one that does not read: its catch-up is written in pieces,
// each counted. (Written as one page of 19 MB, one write that outlasts two
// looks. Less than a socket's buffers between two looks may not wake a
// writer at all: Linux wakes it once a third of them is free.)
func TestEventsSlowReaderKeptInItsStart(t *testing.T) {
	conn, _, fake, n := farBehind(t)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Not resp.Body.Close: it would read the endless stream to its end.
	br := bufio.NewReaderSize(resp.Body, 128<<10)
	got, since := 1, 0 // the first is the client's own Last-Event-ID
	for got < n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d of %d events: %v", got, n, err)
		}
		if strings.HasPrefix(line, "id: ") {
			got++
		}
		if since += len(line); since >= 4<<20 {
			fake.Advance(server.StallCheck) // a look of the watchdog every 4 MB read
			since = 0
		}
	}
}
