package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/server"
)

// msgKey is what the resume tests compare of a message: all of it.
func msgKey(m sseMsg) string { return m.ID + " " + m.Event + " " + m.Data }

// until reads c's messages after its snapshots up to one whose id is in
// stop (not included).
func (c *sseClient) until(stop map[string]bool) []string {
	c.tb.Helper()
	var out []string
	for begun := false; ; {
		m := c.nextChange(&begun)
		if stop[m.ID] {
			return out
		}
		out = append(out, msgKey(m))
	}
}

// TestEventsResumeAtEveryBoundary: a stream of old workers' job entries
// (two per event), new ones (one, also queue:jobs), other events, an
// entry whose data has line breaks, one whose also cannot be re-framed
// and one whose also is its own topic. For each kind of client (job
// topics only, queue:jobs only, both, neither, everything), what it gets
// live is what it gets resuming from before the first entry, and resuming
// from any id (one it got, or one of the others') gives exactly the rest
// of that, in order; the history, paged at any size, lists the same.
func TestEventsResumeAtEveryBoundary(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	subs := []struct {
		name   string
		topics []string
	}{
		{"job:*", []string{"job:*"}},
		{"queue:jobs", []string{"queue:jobs"}},
		{"both", []string{"job:*", "queue:jobs"}},
		{"neither", []string{"rev:*"}},
		{"everything", nil},
	}
	live := make([]*sseClient, len(subs))
	for i, s := range subs {
		live[i] = subscribe(t, base, s.topics, "")
	}
	start := h.emit("rev:start", "")
	key := h.store.Keys().Events()
	jt := func(task string) string { return queue.JobTopic(h.q1, task) }
	raw := func(values ...string) string {
		id, err := h.redis.Client.XAdd(ctx(t), &redis.XAddArgs{Stream: key, Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ts := time.Now().UnixMilli()
	h.addJobEvents(true, done(h.q1, "o1"))
	h.addJobEvents(false, done(h.q1, "n1"))
	h.emit("rev:mid", "")
	pretty := strings.Replace(jobEnvelope(jt("n2"), ts, done(h.q1, "n2")), ",", ",\n  ", -1)
	raw("topic", jt("n2"), "type", health.EventJob, "data", pretty, "also", queue.TopicJobs)
	raw("topic", jt("arr"), "type", health.EventJob, "data", "[1]", "also", queue.TopicJobs)
	h.addJobEvents(false, done(h.q1, "n3"), done(h.q1, "n4"))
	h.addJobEvents(true, done(h.q1, "o2"))
	raw("topic", jt("self"), "type", health.EventJob, "data", jobEnvelope(jt("self"), ts, done(h.q1, "self")), "also", jt("self"))
	h.addJobEvents(false, done(h.q1, "n5"))
	end := h.addJobEvents(false, done(h.q1, "end"))[0]
	endAction := h.emit("rev:end", "")
	stop := map[string]bool{end: true, end + ".1": true, endAction: true}

	full := make([][]string, len(subs))
	for i, s := range subs {
		c := subscribe(t, base, s.topics, start)
		full[i] = c.until(stop)
		c.close()
		got := live[i].until(stop)
		if len(got) > 0 && strings.HasPrefix(got[0], start+" ") {
			got = got[1:] // the start itself
		}
		if !slices.Equal(got, full[i]) {
			t.Errorf("%s: live:\n %s\nresumed from the start:\n %s", s.name, strings.Join(got, "\n "), strings.Join(full[i], "\n "))
		}
	}
	everything := full[len(full)-1]
	at := map[string]int{start: -1}
	for i, k := range everything {
		at[strings.Fields(k)[0]] = i
	}
	for i, s := range subs {
		for _, k := range everything {
			from := strings.Fields(k)[0]
			var want []string
			for _, e := range full[i] {
				if at[strings.Fields(e)[0]] > at[from] {
					want = append(want, e)
				}
			}
			c := subscribe(t, base, s.topics, from)
			got := c.until(stop)
			c.close()
			if !slices.Equal(got, want) {
				t.Errorf("%s, resumed from %s:\n got %s\nwant %s", s.name, from, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
			}
		}
		// The history lists the same, a page at a time.
		for _, limit := range []int{1, 2, 3, 1000} {
			q := url.Values{"topic": s.topics, "limit": {fmt.Sprint(limit)}, "before": {end}}
			var got []string
		pages:
			for range 100 {
				hs := historyOf(t, h, q.Encode())
				for j := len(hs.Events) - 1; j >= 0; j-- {
					e := hs.Events[j]
					if _, ok := at[e.ID]; !ok || e.ID == start {
						if e.ID == start {
							break pages
						}
						t.Fatalf("%s: history has %s %s, not sent", s.name, e.ID, e.Topic)
					}
					got = append(got, e.ID)
				}
				if !hs.More {
					break
				}
				q.Set("before", hs.NextBefore)
			}
			slices.Reverse(got)
			var want []string
			for _, e := range full[i] {
				if strings.HasSuffix(e, " [1]") {
					continue // not an event (the history skips it)
				}
				want = append(want, strings.Fields(e)[0])
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: history by %d: %v, want %v", s.name, limit, got, want)
			}
		}
	}
}

// TestEventsResumeFromOddIDs: a Last-Event-ID that is not an event id,
// or one the stream cannot resume from, gives a reset and a fresh
// snapshot, then what comes after; never a gap or a failure.
func TestEventsResumeFromOddIDs(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	x := h.addJobEvents(false, done(h.q1, "x"))[0]
	plain := h.emit(topic, "plain")
	for _, lastID := range []string{x + ".2", x + ".1.1", x + ".0", x + ".", "-1", "1-", "-", "+", "$", "0", "0-0", "0-0.1",
		"18446744073709551616-0", "18446744073709551615-18446744073709551615", "18446744073709551615-18446744073709551615.1",
		plain + ".2", strings.Repeat("9", 40) + "-0"} {
		c := subscribe(t, base, []string{topic, "queue:jobs"}, lastID)
		if m := c.next(); m.Event != health.EventReset {
			t.Errorf("Last-Event-ID %q: first message %s %s %s, want a reset", lastID, m.Event, m.ID, m.Data)
			c.close()
			continue
		}
		if m := c.next(); m.Event != health.EventSnapshot {
			t.Errorf("Last-Event-ID %q: after the reset %s %s", lastID, m.Event, m.ID)
		}
		id := h.emit(topic, "after")
		if m := c.nextOf(health.EventAction); m.ID != id {
			t.Errorf("Last-Event-ID %q: then %s %s, want %s", lastID, m.Event, m.ID, id)
		}
		c.close()
	}
	// The history before the first id there can be is empty (Redis
	// refuses the range before 0-0); before the last, everything.
	for _, before := range []string{"0-0", "0-0.1", "0-1"} {
		if hs := historyOf(t, h, "before="+before); len(hs.Events) != 0 || hs.More {
			t.Errorf("history before=%s: %d events, more %v", before, len(hs.Events), hs.More)
		}
	}
	for _, before := range []string{"18446744073709551615-18446744073709551615", "18446744073709551615-18446744073709551615.1"} {
		if hs := historyOf(t, h, "topic=queue:jobs&before="+before); len(hs.Events) != 1 || hs.Events[0].ID != x+".1" {
			t.Errorf("history before=%s: %v, want [%s.1]", before, ids(hs.Events), x)
		}
	}
}

// TestEventsTrimmedWhileCatchingUp: a client that resumes from far back
// catches up at its own pace; when the stream is trimmed past where it
// is meanwhile, it must not be sent the rest as if nothing were missing:
// every event it gets follows the one before it in the stream, and when
// its connection ends, resuming from its last event gives a reset.
func TestEventsTrimmedWhileCatchingUp(t *testing.T) {
	// MaxLag above the n entries written below: the broker's reader may
	// still be reading them when the client connects, and each it reads
	// then counts toward the client's lag (a real Redis, in CI: the client
	// was dropped for lag before its first event, 2 runs in 10 here). The
	// subject is the trim, not the lag (TestEventsSlowClientDropped).
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.SSE.MaxLag = 20_000 }})
	base := serveHTTP(t, h.h)
	topic := h.id(0).Topic()
	from := h.emit(topic, "from")
	key := h.store.Keys().Events()
	pad := strings.Repeat("x", 4<<10)
	const n = 3000
	var ids []string
	for len(ids) < n {
		pipe := h.redis.Client.Pipeline()
		var cmds []*redis.StringCmd
		for range 500 {
			e, _ := json.Marshal(health.Event{Topic: topic, Type: health.EventAction, Timestamp: 1, Action: &health.ActionView{Action: "fill", Target: pad}})
			cmds = append(cmds, pipe.XAdd(ctx(t), &redis.XAddArgs{Stream: key, Values: []string{"topic", topic, "type", health.EventAction, "data", string(e)}}))
		}
		if _, err := pipe.Exec(ctx(t)); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	end := h.emit(topic, "end")
	ids = append(ids, end)
	next := map[string]string{from: ids[0]}
	for i := 1; i < len(ids); i++ {
		next[ids[i-1]] = ids[i]
	}

	// A client that reads slowly: a small receive buffer, and nothing
	// read past the first event until the stream is trimmed.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(conn, "GET /api/v1/events?topic=%s HTTP/1.1\r\nHost: x\r\nLast-Event-ID: %s\r\n\r\n", topic, from)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/events: %v %v", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	nextEvent := func() (id, typ string, ok bool) {
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && id != "":
				return id, typ, true
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			}
		}
		return "", "", false
	}
	last, typ, ok := nextEvent()
	if !ok || last != ids[0] {
		t.Fatalf("first event %s %s, want %s", last, typ, ids[0])
	}
	if err := h.redis.Client.XTrimMaxLen(ctx(t), key, 10).Err(); err != nil {
		t.Fatal(err)
	}
	got := 1
	for last != end {
		id, typ, ok := nextEvent()
		if !ok {
			break // dropped: it resumes from last
		}
		if typ == health.EventReset {
			t.Logf("reset after %d events", got)
			return
		}
		if id != next[last] {
			t.Fatalf("after %s (event %d of %d), %s %s: a gap of %d events", last, got, len(ids), typ, id, slices.Index(ids, id)-slices.Index(ids, last)-1)
		}
		last = id
		got++
	}
	if last == end {
		t.Logf("all %d events (the stream was not trimmed in time)", got)
		return
	}
	t.Logf("dropped after %d events", got)
	c := subscribe(t, base, []string{topic}, last)
	if m := c.next(); m.Event != health.EventReset {
		t.Errorf("dropped after %d events; resumed from %s: %s %s, want a reset", got, last, m.Event, m.ID)
	}
}

// TestCurrentJobAfterResumeInsideAnEntry: a client that resumes from a
// job entry's own event or from its queue:jobs event (.1) gets the
// worker_update of a job event after it as a fresh client does: right
// after the job's own event, before its queue:jobs event, once; or not at
// all when the job event reached it through its catch-up (live only).
func TestCurrentJobAfterResumeInsideAnEntry(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	rec := h.seedStored(id, health.StatusHealthy)
	base := serveHTTP(t, h.h)
	topics := []string{id.Topic(), "job:*", "queue:jobs"}
	je := func(task string, seq int64) queue.JobEvent {
		return queue.JobEvent{Queue: h.q1, ID: task, State: queue.StateProcessing, Component: id.String(), PID: rec.PID,
			WorkerJob: task, WorkerSeq: seq}
	}
	x := h.addJobEvents(false, je("x", 1))[0]
	for i, also := range []bool{false, true} {
		last := x
		if also {
			last += ".1"
		}
		c := subscribe(t, base, topics, last)
		var want []string
		if last == x {
			want = append(want, health.EventJob+" "+x+".1 "+queue.TopicJobs)
		}
		task := fmt.Sprint("t", i)
		y := h.addJobEvents(false, je(task, int64(i+2)))[0]
		want = append(want,
			health.EventJob+" "+y+" "+queue.JobTopic(h.q1, task),
			health.EventWorker+" "+y+" "+id.Topic()+" "+task,
			health.EventJob+" "+y+".1 "+queue.TopicJobs)
		end := h.addJobEvents(false, done(h.q1, "end"+task))[0]
		var got []string
		for {
			m := c.next()
			if m.ID == end {
				break
			}
			e := m.event(t)
			s := m.Event + " " + m.ID + " " + e.Topic
			if e.Worker != nil {
				s += " " + e.Worker.CurrentJob
			}
			got = append(got, s)
		}
		caughtUp := slices.Delete(slices.Clone(want), len(want)-2, len(want)-1)
		if !slices.Equal(got, want) && !slices.Equal(got, caughtUp) {
			t.Errorf("resumed from %s:\n got %s\nwant %s", last, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
		c.close()
		x = end
	}
}
