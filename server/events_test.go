package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// TestEventsSnapshotThenDeltas: one snapshot per matching topic that
// exists, all with the id of the stream's last entry, then the matching
// deltas in stream order.
func TestEventsSnapshotThenDeltas(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	h.seed(h.id(1), health.StatusCrashed, func(c *health.Component) { c.ExitCode, c.HasExit = 137, true })
	h.seed(health.ComponentID{Queue: h.q2, Slot: 0}, health.StatusHealthy, nil)
	before := h.emit("queue:status", "before")
	base := serveHTTP(t, h.h)

	c := subscribe(t, base, []string{"worker:" + h.q1 + ":*:status", "queue:*:status"}, "")
	want := []string{"queue:" + h.q1 + ":status", "queue:" + h.q2 + ":status", h.id(0).Topic(), h.id(1).Topic()}
	if h.q2 < h.q1 {
		want[0], want[1] = want[1], want[0]
	}
	for i, topic := range want {
		m := c.next()
		e := m.event(t)
		// The id is the stream's end when the snapshot was read: ours, or
		// a health announcement's after it.
		if i == 0 && idBefore(mustParseID(t, m.ID), mustParseID(t, before)) {
			t.Fatalf("snapshot id %s is before the last event %s", m.ID, before)
		}
		if i == 0 {
			before = m.ID
		}
		if m.Event != "snapshot" || e.Type != "snapshot" || e.Topic != topic || m.ID != before {
			t.Fatalf("message %d: %s %s id %s, want snapshot of %s with id %s", i, m.Event, e.Topic, m.ID, topic, before)
		}
		if strings.HasPrefix(topic, "worker:") && (e.Worker == nil || e.Worker.Component+":status" != topic) {
			t.Errorf("worker snapshot %s: %s", topic, m.Data)
		}
		if strings.HasPrefix(topic, "queue:") && !strings.Contains(string(e.Data), `"pending":0`) {
			t.Errorf("queue snapshot %s: %s", topic, m.Data)
		}
	}

	// Deltas: only the matching ones, in order.
	var ids []string
	for i := range 5 {
		h.emit("worker:"+h.q2+":0:status", "not mine")
		ids = append(ids, h.emit(h.id(i%2).Topic(), fmt.Sprint("delta ", i)))
		h.emit("queue:status", "not mine either")
		h.emit("queue:"+h.q1+":status", fmt.Sprint("queue ", i))
	}
	for i := range 5 {
		m := c.next()
		if m.ID != ids[i] || m.Event != "action" || !strings.Contains(m.Data, fmt.Sprint("delta ", i)) {
			t.Fatalf("delta %d: %+v, want id %s", i, m, ids[i])
		}
		if m := c.next(); !strings.Contains(m.Data, fmt.Sprint("queue ", i)) {
			t.Fatalf("queue delta %d: %+v", i, m)
		}
	}
}

// TestEventsSnapshotOfEverything: with no topic, every kind of topic that
// exists comes in the snapshot.
func TestEventsSnapshotOfEverything(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	if err := h.store.WriteHost(ctx(t), health.Host{ID: "box-1", PID: 1, StartedAt: time.Now(), SeenAt: time.Now()}, time.Minute); err != nil {
		t.Fatal(err)
	}
	base := serveHTTP(t, h.h)
	c := subscribe(t, base, nil, "")
	seen := map[string]health.Event{}
	var id string
	for range 7 { // health, host, queue:status, 2 queues, 1 worker, queue:jobs
		m := c.next()
		if m.Event != "snapshot" || (id != "" && m.ID != id) {
			t.Fatalf("%+v: want a snapshot with id %s", m, id)
		}
		id = m.ID
		e := m.event(t)
		seen[e.Topic] = e
	}
	for _, topic := range []string{"system:health", "host:box-1:status", "queue:status", "queue:" + h.q1 + ":status", "queue:" + h.q2 + ":status", h.id(0).Topic(), "queue:jobs"} {
		if _, ok := seen[topic]; !ok {
			t.Errorf("no snapshot of %s (got %v)", topic, seen)
		}
	}
	var rep server.HealthReport
	if err := json.Unmarshal(seen["system:health"].Data, &rep); err != nil || rep.Status == "" {
		t.Errorf("health snapshot %s: %v", seen["system:health"].Data, err)
	}
	var host server.Host
	if err := json.Unmarshal(seen["host:box-1:status"].Data, &host); err != nil || host.ID != "box-1" || host.Status != "alive" {
		t.Errorf("host snapshot %s: %v", seen["host:box-1:status"].Data, err)
	}
}

// TestEventsResumeNoGapNoDuplicate: a client that resumes with the id of
// the last event it got, while events keep coming, gets every later
// matching event exactly once, in order.
func TestEventsResumeNoGapNoDuplicate(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	h.emit(topic, "first")
	c := subscribe(t, base, []string{topic}, "") // no record: no snapshot
	for i := range 10 {
		h.emit(topic, fmt.Sprint("live ", i))
		h.emit("worker:"+h.q2+":0:status", "other")
	}
	var last string
	for range 10 {
		last = c.next().ID
	}
	c.close()

	// Events keep coming while the client is away and while it resumes.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 300 {
			h.emit(topic, fmt.Sprint("later ", i))
			if i%3 == 0 {
				h.emit("worker:"+h.q2+":0:status", "other")
			}
		}
	}()
	c2 := subscribe(t, base, []string{topic}, last)
	wg.Wait()
	end := h.emit(topic, "end")

	want, err := h.redis.Client.XRange(ctx(t), h.store.Keys().Events(), "("+last, end).Result()
	if err != nil {
		t.Fatal(err)
	}
	var wantIDs []string
	for _, m := range want {
		if m.Values["topic"] == topic {
			wantIDs = append(wantIDs, m.ID)
		}
	}
	if len(wantIDs) != 301 {
		t.Fatalf("%d events after %s, want 301", len(wantIDs), last)
	}
	for i, id := range wantIDs {
		m := c2.next()
		if m.Event == "snapshot" || m.Event == "reset" {
			t.Fatalf("resume sent a %s", m.Event)
		}
		if m.ID != id {
			t.Fatalf("event %d: id %s, want %s (gap or duplicate)", i, m.ID, id)
		}
	}
}

// TestEventsTrimmedResets: resuming from an id the stream no longer holds
// gives reset, then a fresh snapshot with the current end's id, then
// deltas.
func TestEventsTrimmedResets(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	old := h.emit(topic, "old")
	for range 20 {
		h.emit(topic, "filler")
	}
	if err := h.redis.Client.XTrimMaxLen(ctx(t), h.store.Keys().Events(), 5).Err(); err != nil {
		t.Fatal(err)
	}
	end := mustParseID(t, h.lastID())
	for _, lastID := range []string{old, "not-an-id", "99999999999999-0"} {
		c := subscribe(t, base, []string{topic}, lastID)
		m := c.next()
		var e struct {
			Type string           `json:"type"`
			Data server.ResetData `json:"data"`
		}
		if err := json.Unmarshal([]byte(m.Data), &e); err != nil || m.Event != "reset" || e.Type != "reset" || idBefore(mustParseID(t, m.ID), end) || e.Data.LastEventID != lastID || e.Data.Reason == "" {
			t.Fatalf("Last-Event-ID %s: first message %+v (%v), want reset with the stream's end as id", lastID, m, err)
		}
		if s := c.next(); s.Event != "snapshot" || s.ID != m.ID || s.event(t).Topic != topic {
			t.Fatalf("after reset: %+v", s)
		}
		id := h.emit(topic, "after")
		if m := c.next(); m.ID != id {
			t.Fatalf("delta after the snapshot: %+v, want id %s", m, id)
		}
		c.close()
	}
}

// TestEventsSlowClientDropped: a client that never reads is disconnected
// once max_lag events wait for it, while a reading client gets every event.
func TestEventsSlowClientDropped(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.SSE.MaxLag = 100 }})
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	h.emit(topic, "start")

	// The sleeper sends its request and never reads a byte.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\n\r\n", topic)
	reader := subscribe(t, base, []string{topic}, "")

	// Big events fill the sleeper's socket buffers, then its max_lag;
	// the reader keeps up.
	pad := strings.Repeat("x", 64<<10)
	const n, step = 600, 20
	for i := 0; i < n; i += step {
		ids := make([]string, step)
		for j := range step {
			ids[j] = h.emit(topic, pad)
		}
		for j := range step {
			if m := reader.next(); m.ID != ids[j] {
				t.Fatalf("reader: event %d id %s, want %s", i+j, m.ID, ids[j])
			}
		}
	}
	// The sleeper's connection was closed: reading it now reaches EOF
	// rather than waiting for more.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the client that never read was not disconnected: %v", err)
	}
}

// TestEventsBurstCatchUp: a burst larger than what waits for a client in
// memory, but within max_lag, reaches a reading client whole and in order
// (it catches up from the stream) and leaves it connected.
func TestEventsBurstCatchUp(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	c := subscribe(t, base, []string{topic}, "")
	const n = 700 // > 256 in memory, < max_lag 1000
	ids := make([]string, n)
	pipe := h.redis.Client.Pipeline()
	cmds := make([]*redis.StringCmd, n)
	for i := range n {
		e, _ := json.Marshal(health.Event{Topic: topic, Type: health.EventAction, Timestamp: 1, Action: &health.ActionView{Action: "burst", Target: fmt.Sprint(i)}})
		cmds[i] = pipe.XAdd(ctx(t), &redis.XAddArgs{Stream: h.store.Keys().Events(), Values: []string{"topic", topic, "type", health.EventAction, "data", string(e)}})
	}
	if _, err := pipe.Exec(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ids[i] = cmds[i].Val()
	}
	for i := range n {
		if m := c.next(); m.ID != ids[i] {
			t.Fatalf("event %d: id %s, want %s", i, m.ID, ids[i])
		}
	}
	id := h.emit(topic, "after the burst")
	if m := c.next(); m.ID != id {
		t.Fatalf("after the burst: %+v, want id %s", m, id)
	}
}

// TestEventsAcrossServers: a change made through one admin server reaches
// an event client of another on the same Redis.
func TestEventsAcrossServers(t *testing.T) {
	h := newHarness(t, setup{})
	other, err := server.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	c := subscribe(t, serveHTTP(t, other), []string{"queue:*:status"}, "")
	c.next()
	c.next() // the two queues' snapshots
	if rec := h.post("/api/v1/queues/"+h.q1+"/pause", ""); rec.Code != http.StatusOK {
		t.Fatalf("pause: %d %s", rec.Code, rec.Body)
	}
	m := c.nextOf("action")
	e := m.event(t)
	if e.Topic != "queue:"+h.q1+":status" || e.Action == nil || e.Action.Action != "pause" {
		t.Fatalf("%+v", m)
	}
}

// TestEventsHealthAnnouncedOnce: a worker change that changes the health
// gives one health_update, however many admin servers watch.
func TestEventsHealthAnnouncedOnce(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	other, err := server.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	base := serveHTTP(t, h.h)
	c := subscribe(t, base, []string{"system:health"}, "")
	if m := c.next(); m.Event != "snapshot" {
		t.Fatalf("%+v", m)
	}
	crashed := health.Component{ID: h.id(0), Status: health.StatusCrashed, Host: "box-1", ExitCode: 137, HasExit: true, UpdatedAt: time.Now()}
	if _, err := h.store.Write(ctx(t), crashed, health.Write{NoCheck: true}); err != nil {
		t.Fatal(err)
	}
	var rep server.HealthReport
	for rep.Status != server.StatusDegraded {
		m := c.nextOf("health_update")
		e := m.event(t)
		if err := json.Unmarshal(e.Data, &rep); err != nil || e.Topic != "system:health" {
			t.Fatalf("%+v: %v", m, err)
		}
	}
	if !strings.Contains(strings.Join(rep.Reasons, ";"), h.id(0).String()) {
		t.Errorf("reasons %v do not name %s", rep.Reasons, h.id(0))
	}
	// One more change, seen by both servers' brokers, after which the
	// stream must hold one announcement per change.
	crashed.Status = health.StatusStarting
	if _, err := h.store.Write(ctx(t), crashed, health.Write{NoCheck: true}); err != nil {
		t.Fatal(err)
	}
	for rep.Status == server.StatusDegraded && strings.Contains(strings.Join(rep.Reasons, ";"), "crashed") {
		if err := json.Unmarshal(c.nextOf("health_update").event(t).Data, &rep); err != nil {
			t.Fatal(err)
		}
	}
	all, err := h.redis.Client.XRange(ctx(t), h.store.Keys().Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range all {
		if m.Values["type"] != health.EventHealth {
			continue
		}
		var e health.Event
		_ = json.Unmarshal([]byte(m.Values["data"].(string)), &e)
		var r server.HealthReport
		_ = json.Unmarshal(e.Data, &r)
		key := r.Status + strings.Join(r.Reasons, ";")
		seen[key]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("health %q announced %d times in a row", k, n)
		}
	}
}

// TestEventsClientCap: past sse.max_clients, 503.
func TestEventsClientCap(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.SSE.MaxClients = 2 }})
	base := serveHTTP(t, h.h)
	a := subscribe(t, base, []string{"system:health"}, "")
	subscribe(t, base, []string{"system:health"}, "")
	if _, status := trySubscribe(t, base, []string{"system:health"}, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("third client: %d, want 503", status)
	}
	a.close()
	// The place is given back once the first client's handler returned.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, status := trySubscribe(t, base, []string{"system:health"}, "")
		if status == http.StatusOK {
			c.close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed client's place was not given back: %d", status)
		}
		runtime.Gosched()
	}
}

// TestEventsKeepAlive: comments come every keepalive.
func TestEventsKeepAlive(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.SSE.KeepAlive = 50 * time.Millisecond }})
	c := subscribe(t, serveHTTP(t, h.h), []string{"nothing:here"}, "")
	for range 2 {
		if m := c.nextAny(); m.Comment != "keep-alive" {
			t.Fatalf("%+v, want a keep-alive comment", m)
		}
	}
}

// TestEventsBadInput: malformed patterns are 422 problems.
func TestEventsBadInput(t *testing.T) {
	h := newHarness(t, setup{})
	for _, q := range []string{"topic=worker:ta*g", "topic=a::b", "topic=" + strings.Repeat("a", 300)} {
		rec := h.do(req{method: http.MethodGet, path: "/api/v1/events?" + q})
		wantProblem(t, rec, http.StatusUnprocessableEntity)
	}
}

// TestEventsCloseWithClients: Close ends every stream (the clients see the
// end), and later requests answer 503.
func TestEventsCloseWithClients(t *testing.T) {
	h := newHarness(t, setup{})
	srv, err := server.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := serveHTTP(t, srv)
	var cs []*sseClient
	for range 5 {
		cs = append(cs, subscribe(t, base, nil, ""))
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !c.ended() {
			t.Fatal("a stream outlived Close")
		}
		// Its response ended as it should (the last chunk), not cut.
		if c.err != nil {
			t.Errorf("a stream ended with %v", c.err)
		}
	}
	if _, status := trySubscribe(t, base, nil, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %d", status)
	}
	_ = srv.Close()
}

// TestEventsRedisDown: a broker whose Redis does not answer still closes.
func TestEventsRedisDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	srv, err := server.New(server.Config{Store: health.NewStore(rdb, "", 0), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = srv.Close(); close(done) }()
	select {
	case <-done:
	case <-c.Done():
		t.Fatal("Close hung")
	}
}

// mustParseID parses a stream id into its two numbers, which compare
// like the ids.
func mustParseID(tb testing.TB, id string) [2]uint64 {
	tb.Helper()
	var v [2]uint64
	if _, err := fmt.Sscanf(id, "%d-%d", &v[0], &v[1]); err != nil {
		tb.Fatalf("stream id %q: %v", id, err)
	}
	return v
}

func idBefore(a, b [2]uint64) bool { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]) }

// TestEventsCloseWithStuckClient: Close returns even when a client never
// reads and its socket is full (its writes are cut after the grace).
func TestEventsCloseWithStuckClient(t *testing.T) {
	h := newHarness(t, setup{})
	srv, err := server.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := serveHTTP(t, srv)
	topic := h.id(0).Topic()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\n\r\n", topic)
	// A reader on the same topic tells when the sleeper has been sent
	// everything, i.e. its socket buffers hold what they can.
	reader := subscribe(t, base, []string{topic}, "")
	pad := strings.Repeat("x", 64<<10)
	for range 200 {
		h.emit(topic, pad)
		reader.next()
	}
	done := make(chan struct{})
	go func() {
		_ = srv.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a client that does not read")
	}
}

// TestEventsPerAddressCap: past sse.max_clients_per_address streams from
// one client address, 429; another address still gets in (issue 18, row
// 6: 3,000 streams from one client).
func TestEventsPerAddressCap(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) {
		c.SSE.MaxClientsPerAddress = 2
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} // to tell clients apart
	}})
	base := serveHTTP(t, h.h)
	open := func(from string) int {
		ctx, cancel := context.WithCancel(context.Background())
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events?topic=system:health", nil)
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("X-Forwarded-For", from)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cancel()
			resp.Body.Close()
		})
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429, 429} {
		if got := open("192.0.2.1"); got != want {
			t.Errorf("stream %d from 192.0.2.1: %d, want %d", i+1, got, want)
		}
	}
	if got := open("192.0.2.2"); got != http.StatusOK {
		t.Errorf("first stream from 192.0.2.2: %d, want 200", got)
	}
}

// TestEventsOverTLS: a stream net/http keeps (HTTP/2: its connection
// cannot be taken) gets its snapshot and the events after it, and Close
// ends it cleanly, as a stream on a taken HTTP/1.1 TLS connection does.
func TestEventsOverTLS(t *testing.T) {
	t.Run("HTTP/2", func(t *testing.T) { testEventsOverTLS(t, true) })
	// Over HTTP/1.1 the broker takes the TLS connection from net/http
	// and ends it itself (close_notify, then the TCP connection).
	t.Run("HTTP/1.1 taken", func(t *testing.T) { testEventsOverTLS(t, false) })
}

func testEventsOverTLS(t *testing.T, h2 bool) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	srv, err := server.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.EnableHTTP2 = h2
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/v1/events?topic="+h.id(0).Topic(), nil)
	r.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := ts.Client().Do(r)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	want := 1
	if h2 {
		want = 2
	}
	if resp.ProtoMajor != want || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("%s %d %q, want HTTP/%d 200 text/event-stream", resp.Proto, resp.StatusCode, resp.Header.Get("Content-Type"), want)
	}
	// Connection: close is the broker's head on a taken connection;
	// net/http would keep it open.
	if !h2 && (!resp.Close || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked") {
		cancel()
		resp.Body.Close()
		t.Fatalf("close=%v %v, want the broker's own head (Connection: close, chunked)", resp.Close, resp.TransferEncoding)
	}
	c := newSSEClient(t, resp, cancel)
	if m := c.next(); m.Event != health.EventSnapshot || m.event(t).Topic != h.id(0).Topic() {
		t.Fatalf("first message %+v, want the snapshot of %s", m, h.id(0))
	}
	h.emit(h.id(0).Topic(), "after")
	if m := c.next(); m.event(t).Topic != h.id(0).Topic() || !strings.Contains(m.Data, "after") {
		t.Fatalf("%+v, want the event after the snapshot", m)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if !c.ended() {
		t.Fatal("the stream outlived Close")
	}
	if c.err != nil {
		t.Errorf("the stream ended with %v", c.err)
	}
}

// TestEventsClientSendsAfterItsRequest: bytes a client sends on a taken
// connection after its request do not end its stream (net/http's rule);
// once it goes, its place is given back.
func TestEventsClientSendsAfterItsRequest(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.SSE.MaxClientsPerAddress = 1 }})
	base := serveHTTP(t, h.h)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	topic := h.id(0).Topic()
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", topic, testToken)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.TransferEncoding == nil || resp.TransferEncoding[0] != "chunked" || !resp.Close {
		t.Fatalf("%d %v close=%v, want 200, chunked, Connection: close", resp.StatusCode, resp.TransferEncoding, resp.Close)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c := newSSEClient(t, resp, func() {})
	h.emit(topic, "after the bytes")
	for {
		m := c.next()
		if strings.Contains(m.Data, "after the bytes") {
			break
		}
	}
	// Gone: the place is free again (one per address).
	conn.Close()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c2, status := trySubscribe(t, base, []string{topic}, "")
		if status == http.StatusOK {
			c2.close()
			break
		}
		// Its reader stopped at the bytes: a write finds it gone.
		h.emit(topic, "a write that finds the client gone")
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the place of a client that went is not given back: %d", status)
		}
	}
}
