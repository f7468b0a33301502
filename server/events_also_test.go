package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/server"
)

// A job event is one stream entry under the job's topic that is also
// queue:jobs's (health.EntryAlso); workers before wrote it twice, one entry
// per topic. Either way, every client gets what it got from the two
// entries: under each topic it asks for, once, with that topic in the
// event, and an id of its own.

// jobEnvelope is a job event as the worker frames it under topic.
func jobEnvelope(topic string, ts int64, je queue.JobEvent) string {
	data, _ := json.Marshal(je)
	env, _ := json.Marshal(health.Event{Topic: topic, Type: health.EventJob, Timestamp: ts, Data: data})
	return string(env)
}

// addJobEvents writes the job events of jes as a worker does (one entry
// each, also queue:jobs), or as an old worker did (old: two entries each,
// the job's topic then queue:jobs), in one round trip; it returns the
// stream ids.
func (h *harness) addJobEvents(old bool, jes ...queue.JobEvent) []string {
	h.tb.Helper()
	pipe := h.redis.Client.Pipeline()
	ts := time.Now().UnixMilli()
	for _, je := range jes {
		topic := queue.JobTopic(je.Queue, je.ID)
		if old {
			for _, t := range []string{topic, queue.TopicJobs} {
				pipe.XAdd(ctx(h.tb), &redis.XAddArgs{Stream: h.store.Keys().Events(),
					Values: []string{"topic", t, "type", health.EventJob, "data", jobEnvelope(t, ts, je)}})
			}
			continue
		}
		h.store.AddEncodedEventTo(ctx(h.tb), pipe, topic, queue.TopicJobs, health.EventJob, jobEnvelope(topic, ts, je))
	}
	cmds, err := pipe.Exec(ctx(h.tb))
	if err != nil {
		h.tb.Fatal(err)
	}
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.(*redis.StringCmd).Val()
	}
	return ids
}

func done(q, task string) queue.JobEvent {
	return queue.JobEvent{Queue: q, ID: task, Type: "demo:work", State: queue.StateDone, MaxRetry: 3, DurationMS: 12}
}

// jobMsg is what a test checks of a job_update it got.
type jobMsg struct{ id, topic, task string }

// nextChange is c's next message but the snapshots before its first
// change (*begun: one came).
func (c *sseClient) nextChange(begun *bool) sseMsg {
	c.tb.Helper()
	for {
		m := c.next()
		if m.Event == health.EventSnapshot && !*begun {
			continue
		}
		*begun = true
		return m
	}
}

// jobUpdates reads c's job_updates up to the one of task end (not
// included), skipping other messages (snapshots only before the first);
// every one's data must be what a worker writes under its topic.
func (c *sseClient) jobUpdates(end string) []jobMsg {
	c.tb.Helper()
	var out []jobMsg
	for begun := false; ; {
		m := c.nextChange(&begun)
		if m.Event == health.EventSnapshot || m.Event == health.EventReset {
			c.tb.Fatalf("a %s among the changes: %s", m.Event, m.Data)
		}
		if m.Event != health.EventJob {
			continue
		}
		e := m.event(c.tb)
		je, err := queue.DecodeJobEvent(e)
		if err != nil {
			c.tb.Fatal(err)
		}
		if je.ID == end {
			return out
		}
		if want := jobEnvelope(e.Topic, e.Timestamp, je); m.Data != want {
			c.tb.Fatalf("event %s:\n got %s\nwant %s", m.ID, m.Data, want)
		}
		out = append(out, jobMsg{m.ID, e.Topic, je.ID})
	}
}

// TestEventsJobEventOnceUnderEachTopic: entries of an old worker (two per
// job event) and of a new one (one, also queue:jobs) reach each client
// once under each topic it asks for: a client of queue:jobs gets the new
// entry re-framed with topic queue:jobs and id <entry>.1, one of the job's
// topic the entry itself, one of both the two.
func TestEventsJobEventOnceUnderEachTopic(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	jt := func(task string) string { return queue.JobTopic(h.q1, task) }
	subs := []struct {
		name   string
		topics []string
		jobs   bool // job topics
		all    bool // queue:jobs
	}{
		{"queue:jobs", []string{"queue:jobs"}, false, true},
		{"queue:*", []string{"queue:*"}, false, true},
		{"job:*", []string{"job:*"}, true, false},
		{"the jobs' topics", []string{jt("old"), jt("new"), jt("end")}, true, false},
		{"both", []string{"job:*", "queue:jobs"}, true, true},
		{"everything", nil, true, true},
	}
	clients := make([]*sseClient, len(subs))
	for i, s := range subs {
		clients[i] = subscribe(t, base, s.topics, "")
	}
	old := h.addJobEvents(true, done(h.q1, "old"))
	nw := h.addJobEvents(false, done(h.q1, "new"))
	h.addJobEvents(false, done(h.q1, "end"))
	for i, s := range subs {
		var want []jobMsg
		if s.jobs {
			want = append(want, jobMsg{old[0], jt("old"), "old"})
		}
		if s.all {
			want = append(want, jobMsg{old[1], queue.TopicJobs, "old"})
		}
		if s.jobs {
			want = append(want, jobMsg{nw[0], jt("new"), "new"})
		}
		if s.all {
			want = append(want, jobMsg{nw[0] + ".1", queue.TopicJobs, "new"})
		}
		if got := clients[i].jobUpdates("end"); !slices.Equal(got, want) {
			t.Errorf("%s: got %v\nwant %v", s.name, got, want)
		}
	}
}

// TestEventsResumeWithinAnEntry: Last-Event-ID may be an entry's own id,
// after which its queue:jobs event is still due to a client that wants it,
// or that id with .1, after which nothing of the entry is: no gap, no
// duplicate, for each kind of client.
func TestEventsResumeWithinAnEntry(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	jt := func(task string) string { return queue.JobTopic(h.q1, task) }
	ids := h.addJobEvents(false, done(h.q1, "a"), done(h.q1, "b"))
	a, b := ids[0], ids[1]
	cases := []struct {
		name   string
		topics []string
		last   string
		want   []jobMsg
	}{
		{"both, from a's own event", []string{"job:*", "queue:jobs"}, a,
			[]jobMsg{{a + ".1", queue.TopicJobs, "a"}, {b, jt("b"), "b"}, {b + ".1", queue.TopicJobs, "b"}}},
		{"both, from a's queue:jobs event", []string{"job:*", "queue:jobs"}, a + ".1",
			[]jobMsg{{b, jt("b"), "b"}, {b + ".1", queue.TopicJobs, "b"}}},
		{"both, from b's own event (the stream's last entry)", []string{"job:*", "queue:jobs"}, b,
			[]jobMsg{{b + ".1", queue.TopicJobs, "b"}}},
		{"both, from the stream's last event", []string{"job:*", "queue:jobs"}, b + ".1", nil},
		{"job:*, from a's own event", []string{"job:*"}, a, []jobMsg{{b, jt("b"), "b"}}},
		{"queue:jobs, from a's queue:jobs event", []string{"queue:jobs"}, a + ".1", []jobMsg{{b + ".1", queue.TopicJobs, "b"}}},
		{"queue:jobs, from a's own event", []string{"queue:jobs"}, a,
			[]jobMsg{{a + ".1", queue.TopicJobs, "a"}, {b + ".1", queue.TopicJobs, "b"}}},
	}
	var clients []*sseClient
	for _, tc := range cases {
		clients = append(clients, subscribe(t, base, tc.topics, tc.last))
	}
	// Written while they catch up: the live fan-out takes over.
	c := h.addJobEvents(false, done(h.q1, "c"))[0]
	h.addJobEvents(false, done(h.q1, "end"))
	for i, tc := range cases {
		want := tc.want
		if slices.Contains(tc.topics, "job:*") {
			want = append(want, jobMsg{c, jt("c"), "c"})
		}
		if slices.Contains(tc.topics, "queue:jobs") {
			want = append(want, jobMsg{c + ".1", queue.TopicJobs, "c"})
		}
		if got := clients[i].jobUpdates("end"); !slices.Equal(got, want) {
			t.Errorf("%s: got %v\nwant %v", tc.name, got, want)
		}
	}
}

// TestEventsFreshClientAfterAnAlsoEntry: a client without Last-Event-ID
// gets its snapshot with the id of the stream's last event (the queue:jobs
// event of a job's entry: <entry>.1), and then only what is written after
// it, not that entry's queue:jobs event again.
func TestEventsFreshClientAfterAnAlsoEntry(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	a := h.addJobEvents(false, done(h.q1, "a"))[0]
	cl := subscribe(t, base, []string{"queue:jobs"}, "")
	if m := cl.next(); m.Event != health.EventSnapshot || m.ID != a+".1" {
		t.Fatalf("first message %s %s, want the snapshot with id %s.1", m.Event, m.ID, a)
	}
	b := h.addJobEvents(false, done(h.q1, "b"))[0]
	h.addJobEvents(false, done(h.q1, "end"))
	if got, want := cl.jobUpdates("end"), []jobMsg{{b + ".1", queue.TopicJobs, "b"}}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// And one that resumes from that snapshot's id.
	cl2 := subscribe(t, base, []string{"queue:jobs", "job:*"}, a+".1")
	if got, want := cl2.jobUpdates("end"), []jobMsg{{b, queue.JobTopic(h.q1, "b"), "b"}, {b + ".1", queue.TopicJobs, "b"}}; !slices.Equal(got, want) {
		t.Errorf("resumed from %s.1: got %v, want %v", a, got, want)
	}
}

// TestEventsBurstCatchUpAlso: a burst of job entries larger than what waits
// for a client in memory reaches it whole, each entry's two events in
// order, when it catches up from the stream (which may stop between an
// entry's two events).
func TestEventsBurstCatchUpAlso(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, h.h)
	both := subscribe(t, base, []string{"job:*", "queue:jobs"}, "")
	jobs := subscribe(t, base, []string{"queue:jobs"}, "")
	const n = 600 // 1,200 events: > 256 in memory; 600 entries < max_lag 1000
	jes := make([]queue.JobEvent, n)
	for i := range jes {
		jes[i] = done(h.q1, fmt.Sprint("t", i))
	}
	ids := h.addJobEvents(false, jes...)
	h.addJobEvents(false, done(h.q1, "end"))
	var wantBoth, wantJobs []jobMsg
	for i, id := range ids {
		task := fmt.Sprint("t", i)
		wantBoth = append(wantBoth, jobMsg{id, queue.JobTopic(h.q1, task), task}, jobMsg{id + ".1", queue.TopicJobs, task})
		wantJobs = append(wantJobs, jobMsg{id + ".1", queue.TopicJobs, task})
	}
	for _, c := range []struct {
		name string
		cl   *sseClient
		want []jobMsg
	}{{"both", both, wantBoth}, {"queue:jobs", jobs, wantJobs}} {
		got := c.cl.jobUpdates("end")
		if len(got) != len(c.want) {
			t.Fatalf("%s: %d events, want %d", c.name, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s: event %d: %v, want %v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

// TestCurrentJobOnceForAnAlsoEntry: the worker_update the broker makes of
// a job event that changed its worker's current job follows the job's own
// event, once, whether the job event is one entry (also queue:jobs) or two
// (an old worker's); the queue:jobs event comes after it, as the second
// entry did.
func TestCurrentJobOnceForAnAlsoEntry(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	rec := h.seedStored(id, health.StatusHealthy)
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic(), "job:*", "queue:jobs"}, "")
	// The worker's and queue:jobs's: then the client joins the live
	// fan-out (a catch-up from the stream has no derived worker_update).
	for range 2 {
		if m := c.next(); m.Event != health.EventSnapshot {
			t.Fatalf("%+v, want a snapshot", m)
		}
	}
	for seq, old := range []bool{true, false} {
		task := fmt.Sprint("t", seq)
		je := queue.JobEvent{Queue: h.q1, ID: task, State: queue.StateProcessing, Component: id.String(), PID: rec.PID,
			WorkerJob: task, WorkerSeq: int64(seq + 1)}
		ids := h.addJobEvents(old, je)
		end := h.addJobEvents(false, done(h.q1, "end"+task))[0]
		second := ids[0] + ".1"
		if old {
			second = ids[1]
		}
		want := []string{
			health.EventJob + " " + ids[0] + " " + queue.JobTopic(h.q1, task),
			health.EventWorker + " " + ids[0] + " " + id.Topic() + " " + task,
			health.EventJob + " " + second + " " + queue.TopicJobs,
			health.EventJob + " " + end + " " + queue.JobTopic(h.q1, "end"+task),
		}
		var got []string
		for len(got) < len(want) {
			m := c.next()
			e := m.event(t)
			s := m.Event + " " + m.ID + " " + e.Topic
			if e.Worker != nil {
				s += " " + e.Worker.CurrentJob
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("old %v:\n got %s\nwant %s", old, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
		if m := c.next(); m.ID != end+".1" {
			t.Errorf("old %v: after the end's own event: %s %s %s", old, m.Event, m.ID, m.Data)
		}
	}
}

// TestHistoryOfAlsoEntries: the history lists a job's entry under each
// topic asked for, the queue:jobs one with id <entry>.1 and topic
// queue:jobs, as an old worker's two entries are; a page may end between
// an entry's two events, and before=<entry>.1 goes on from there.
func TestHistoryOfAlsoEntries(t *testing.T) {
	h := newHarness(t, setup{})
	old := h.addJobEvents(true, done(h.q1, "old"))
	nw := h.addJobEvents(false, done(h.q1, "new"))[0]
	check := func(what string, hs server.History, want ...string) {
		t.Helper()
		var got []string
		for _, e := range hs.Events {
			var je queue.JobEvent
			if err := json.Unmarshal(e.Data, &je); err != nil {
				t.Fatal(err)
			}
			got = append(got, e.ID+" "+e.Topic+" "+je.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", what, got, want)
		}
	}
	jt := func(task string) string { return queue.JobTopic(h.q1, task) }
	check("queue:jobs", historyOf(t, h, "topic=queue:jobs"), old[1]+" queue:jobs old", nw+".1 queue:jobs new")
	check("job:*", historyOf(t, h, "topic=job:*"), old[0]+" "+jt("old")+" old", nw+" "+jt("new")+" new")
	all := []string{old[0] + " " + jt("old") + " old", old[1] + " queue:jobs old", nw + " " + jt("new") + " new", nw + ".1 queue:jobs new"}
	check("both", historyOf(t, h, "topic=job:*&topic=queue:jobs"), all...)
	// A page at a time, newest first.
	var pages []string
	q := "topic=job:*&topic=queue:jobs&limit=1"
	for range 10 {
		hs := historyOf(t, h, q)
		if len(hs.Events) == 0 && !hs.More {
			break // the page after the last
		}
		if len(hs.Events) != 1 {
			t.Fatalf("page %d (%s): %+v; before: %v", len(pages), q, hs, pages)
		}
		e := hs.Events[0]
		var je queue.JobEvent
		_ = json.Unmarshal(e.Data, &je)
		pages = append(pages, e.ID+" "+e.Topic+" "+je.ID)
		if !hs.More {
			break
		}
		if hs.NextBefore != e.ID {
			t.Fatalf("next_before %s after %s", hs.NextBefore, e.ID)
		}
		q = "topic=job:*&topic=queue:jobs&limit=1&before=" + hs.NextBefore
	}
	slices.Reverse(pages)
	if !slices.Equal(pages, all) {
		t.Errorf("paged:\n got %v\nwant %v", pages, all)
	}
	check("before the queue:jobs event", historyOf(t, h, "topic=job:*&topic=queue:jobs&before="+nw+".1"), all[:3]...)
	if rec := h.get("/api/v1/events/history?before=" + nw + ".2"); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("before=%s.2: %d", nw, rec.Code)
	}
}
