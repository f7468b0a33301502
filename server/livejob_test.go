package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/server"
)

// Live current job (issue 20): a real worker process runs a job; an event
// client of the worker's topic sees a worker_update naming the job while
// it runs and one with no job once it is done. Before, the worker wrote
// current_job into its record and no worker_update followed.
func TestCurrentJobLive(t *testing.T) {
	h := newHarness(t, setup{workers: 1, command: []string{vigilBin, "worker", "--demo"}})
	id := h.id(0)
	h.waitStatus(id, health.StatusHealthy, false)
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic()}, "")
	if m := c.next(); m.Event != health.EventSnapshot {
		t.Fatalf("first message %+v, want the snapshot", m)
	}
	j := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"demo:work","payload":{"ms":300}}`), http.StatusCreated)

	running := c.waitWorker(func(w *health.WorkerView) bool { return w.CurrentJob == j.ID })
	if running.Status != string(health.StatusHealthy) || running.CurrentSeq == 0 || running.Rev == 0 {
		t.Errorf("while it runs: %+v", running)
	}
	idle := c.waitWorker(func(w *health.WorkerView) bool { return w.CurrentJob == "" })
	if idle.CurrentSeq <= running.CurrentSeq || idle.PID != running.PID {
		t.Errorf("once done: %+v (while it ran: %+v)", idle, running)
	}
	rec, err := h.store.Get(ctx(t), id)
	if err != nil || rec.CurrentJob != "" || rec.CurrentSeq != idle.CurrentSeq {
		t.Errorf("record %+v, %v; last event %+v", rec, err, idle)
	}
}

// waitWorker returns the first worker_update whose worker satisfies ok.
func (c *sseClient) waitWorker(ok func(*health.WorkerView) bool) *health.WorkerView {
	c.tb.Helper()
	for {
		m := c.nextOf(health.EventWorker)
		if e := m.event(c.tb); e.Worker != nil && ok(e.Worker) {
			return e.Worker
		}
	}
}

// The last worker_update a client gets matches the record, while the
// supervisor changes the worker's status (operator restarts) as it runs
// jobs, and its current job changes at once: the supervisor's events carry
// the record's current job, not its own idea of it, and a change of the
// current job is not undone by an event written before it.
func TestCurrentJobEventsEndAtTheRecord(t *testing.T) {
	h := newHarness(t, setup{workers: 1, command: []string{vigilBin, "worker", "--demo"}})
	id := h.id(0)
	h.waitStatus(id, health.StatusHealthy, false)
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic()}, "")
	enqueue := func(ms int) server.Job {
		t.Helper()
		return decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"demo:work","payload":{"ms":`+strconv.Itoa(ms)+`}}`), http.StatusCreated)
	}
	for round := range 3 {
		for range 20 {
			enqueue(20)
		}
		// Restart while those run: stopping, stopped, starting, its pid,
		// healthy, written by the supervisor and the new process's
		// heartbeat between the jobs' current-job changes.
		decode[server.WorkerAction](t, h.post("/api/v1/workers/"+id.String()+"/restart", ""), http.StatusOK)
		h.waitStatus(id, health.StatusHealthy, false)
		// Its announcement too (the heartbeat writes it after the record,
		// and a loaded machine may delay it past the next job's events):
		// the announcement of the process the record names when it comes
		// (on a loaded machine the new process may itself be replaced
		// before it announced itself; its successor's counts).
		h.waitStream(func(e health.Event) bool {
			if e.Type != health.EventWorker || e.Worker == nil || e.Worker.Component != id.String() ||
				e.Worker.Status != string(health.StatusHealthy) {
				return false
			}
			cur, err := h.store.Get(ctx(t), id)
			return err == nil && cur.Status == health.StatusHealthy && e.Worker.PID == cur.PID
		})
		t.Logf("round %d: restarted", round)
	}
	// A long job, to end with a current job that changed after the last
	// status change.
	long := enqueue(4000)
	// Its processing event is in the stream (the record's current job is
	// written in the same round trip, just before it).
	h.waitStream(func(e health.Event) bool {
		if e.Topic != queue.JobTopic(h.q1, long.ID) {
			return false
		}
		je, err := queue.DecodeJobEvent(e)
		return err == nil && je.State == queue.StateProcessing
	})
	rec, err := h.store.Get(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CurrentJob != long.ID {
		t.Fatalf("record while the long job runs: %+v", rec)
	}
	// Every event before this marker reaches the client before it.
	marker := h.emit(id.Topic(), "marker")
	var last *health.WorkerView
	var seen []string
	for {
		m := c.next()
		if m.ID == marker && m.Event == health.EventAction {
			break
		}
		if m.Event == health.EventWorker {
			last = m.event(t).Worker
			seen = append(seen, m.ID+" "+last.Status+" pid "+strconv.Itoa(last.PID)+" rev "+strconv.FormatInt(last.Rev, 10)+" seq "+strconv.FormatInt(last.CurrentSeq, 10))
		}
	}
	if len(seen) > 12 {
		seen = seen[len(seen)-12:]
	}
	t.Logf("the last worker_updates:\n%s", strings.Join(seen, "\n"))
	if last == nil {
		t.Fatal("no worker_update")
	}
	if last.Status != string(rec.Status) || last.PID != rec.PID || last.CurrentJob != rec.CurrentJob || last.CurrentSeq != rec.CurrentSeq {
		t.Errorf("last worker_update: status %s pid %d job %q seq %d; record: status %s pid %d job %q seq %d",
			last.Status, last.PID, last.CurrentJob, last.CurrentSeq, rec.Status, rec.PID, rec.CurrentJob, rec.CurrentSeq)
	}
}

// waitStream blocks until the event stream holds an event for which ok
// holds.
func (h *harness) waitStream(ok func(health.Event) bool) {
	h.tb.Helper()
	c := ctx(h.tb)
	last := "0"
	for {
		res, err := h.redis.Client.XRead(c, &redis.XReadArgs{Streams: []string{h.store.Keys().Events(), last}, Block: 2 * time.Second, Count: 1000}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			var tail []string
			if msgs, rerr := h.redis.Client.XRevRangeN(context.Background(), h.store.Keys().Events(), "+", "-", 15).Result(); rerr == nil {
				for _, m := range msgs {
					data, _ := m.Values["data"].(string)
					tail = append(tail, m.ID+" "+truncateForLog(data, 200))
				}
			}
			h.tb.Fatalf("wait for an event: %v; the stream's last entries, newest first:\n%s", err, strings.Join(tail, "\n"))
		}
		for _, m := range res[0].Messages {
			last = m.ID
			var e health.Event
			data, _ := m.Values["data"].(string)
			if json.Unmarshal([]byte(data), &e) == nil && ok(e) {
				return
			}
		}
	}
}

// The broker's rules, on entries written by hand: a current-job change of a
// worker it has no view of reads the record; a worker_update written before
// a change it has passed on gets the newer current job; one with a lower
// rev than one passed on is not sent; a change of a process the view does
// not name yet waits for that process's worker_update.
func TestCurrentJobBrokerOrder(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	h.seed(id, health.StatusHealthy, nil)
	rec, err := h.store.Get(ctx(t), id)
	if err != nil || rec.Rev == 0 {
		t.Fatalf("seeded %+v, %v: want a rev", rec, err)
	}
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic()}, "")
	if m := c.next(); m.Event != health.EventSnapshot {
		t.Fatalf("first message %+v, want the snapshot", m)
	}
	job := func(task string, pid int, current string, seq int64) {
		t.Helper()
		addProcessing(t, h, id, task, pid, current, seq)
	}
	update := func(mod func(*health.Component)) string {
		t.Helper()
		c := rec
		mod(&c)
		id, err := h.store.AddEvent(ctx(t), health.WorkerEvent(c, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	expect := func(what string, ok func(*health.WorkerView) bool) {
		t.Helper()
		expectWorkerUpdate(t, c, what, ok)
	}

	job("t1", rec.PID, "t1", 1)
	expect("the change, from the record read", func(w *health.WorkerView) bool {
		return w.CurrentJob == "t1" && w.CurrentSeq == 1 && w.Status == "healthy" && w.Rev == rec.Rev
	})
	job("t2", rec.PID, "t2", 2)
	expect("the next change", func(w *health.WorkerView) bool { return w.CurrentJob == "t2" && w.CurrentSeq == 2 })
	// The supervisor read the record before the change to t2.
	update(func(c *health.Component) {
		c.Status, c.Rev, c.CurrentJob, c.CurrentSeq = health.StatusStopping, rec.Rev+5, "t1", 1
	})
	expect("a status change carrying an older current job", func(w *health.WorkerView) bool {
		return w.Status == "stopping" && w.CurrentJob == "t2" && w.CurrentSeq == 2 && w.Rev == rec.Rev+5
	})
	// An older status, written after.
	update(func(c *health.Component) { c.Status, c.Rev = health.StatusHealthy, rec.Rev+2 })
	marker := h.emit(id.Topic(), "marker")
	if m := c.next(); m.ID != marker {
		t.Fatalf("an older worker_update was sent: %s %s", m.Event, m.Data)
	}
	// A new process's change before its own worker_update.
	job("u1", 9999, "u1", 1)
	marker = h.emit(id.Topic(), "marker 2")
	if m := c.next(); m.ID != marker {
		t.Fatalf("a change of a process the view does not name was sent: %s %s", m.Event, m.Data)
	}
	update(func(c *health.Component) {
		c.Status, c.PID, c.Rev, c.CurrentJob, c.CurrentSeq = health.StatusHealthy, 9999, rec.Rev+10, "", 0
	})
	expect("the new process, with its change", func(w *health.WorkerView) bool {
		return w.PID == 9999 && w.CurrentJob == "u1" && w.CurrentSeq == 1 && w.Rev == rec.Rev+10
	})
}

// A worker's new process may have its old process's pid: a host whose
// supervisor runs in a container (the Dockerfile's) and restarts gets a
// fresh pid namespace and spawns its workers in the same order. The
// broker took the new process for the old one: the new process's first
// worker_update (starting, no current job) came with the old process's
// last current job, and the new process's changes, numbered from 1 again,
// were dropped as older than the old one's until they passed its count. A
// process is its pid and its started_at.
func TestCurrentJobPIDReused(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	rec := h.seedStored(id, health.StatusHealthy)
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic()}, "")
	if m := c.next(); m.Event != health.EventSnapshot {
		t.Fatalf("first message %+v, want the snapshot", m)
	}
	job := func(task string, pid int, current string, seq int64) {
		t.Helper()
		addProcessing(t, h, id, task, pid, current, seq)
	}
	expect := func(what string, ok func(*health.WorkerView) bool) {
		t.Helper()
		expectWorkerUpdate(t, c, what, ok)
	}
	for i := int64(1); i <= 3; i++ {
		task := "t" + strconv.FormatInt(i, 10)
		job(task, rec.PID, task, i)
		expect("the old process's change "+task, func(w *health.WorkerView) bool { return w.CurrentJob == task && w.CurrentSeq == i })
	}
	// The host restarts: the supervisor writes the slot starting (the old
	// process's current job cleared), forks, and records the new pid,
	// the old one's.
	n := rec
	n.Status, n.PID, n.CurrentJob, n.CurrentSeq = health.StatusStarting, 0, "", 0
	n.StartedAt, n.UpdatedAt = time.Now().Truncate(time.Millisecond), time.Now()
	if _, err := h.store.Write(ctx(t), n, health.Write{NoCheck: true, NoEvent: true}); err != nil {
		t.Fatal(err)
	}
	n.PID = rec.PID
	if err := h.store.SetPID(ctx(t), n, ""); err != nil {
		t.Fatal(err)
	}
	expect("the new process", func(w *health.WorkerView) bool {
		return w.Status == "starting" && w.PID == rec.PID && w.StartedAt == n.StartedAt.UnixMilli() && w.CurrentJob == "" && w.CurrentSeq == 0
	})
	job("u1", rec.PID, "u1", 1)
	expect("the new process's first change", func(w *health.WorkerView) bool {
		return w.PID == rec.PID && w.CurrentJob == "u1" && w.CurrentSeq == 1
	})
}

// A current-job change of a worker the broker has no view of, whose record
// it could not read (Redis failed the read, or timed it out), is sent once
// a later read succeeds: on the next batch, or when the stream is idle.
// Before, it was lost: the worker's current job stayed stale for clients
// until its next change (a long job's whole run).
func TestCurrentJobReadRetried(t *testing.T) {
	h := newHarness(t, setup{})
	id, other := h.id(0), health.ComponentID{Queue: h.q1, Slot: 1}
	h.seed(id, health.StatusHealthy, nil)
	h.seed(other, health.StatusHealthy, nil)
	rdb := h.redis.Client
	key := h.store.Keys().Component(id)
	c := subscribe(t, serveHTTP(t, h.h), []string{id.Topic()}, "")
	if m := c.next(); m.Event != health.EventSnapshot {
		t.Fatalf("first message %+v, want the snapshot", m)
	}
	o := subscribe(t, serveHTTP(t, h.h), []string{other.Topic()}, "")
	if m := o.next(); m.Event != health.EventSnapshot {
		t.Fatalf("first message %+v, want the snapshot", m)
	}
	// A read of the record fails (WRONGTYPE, as an error of Redis would).
	if err := rdb.Del(ctx(t), key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx(t), key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(queue.JobEvent{Queue: h.q1, ID: "t1", State: queue.StateProcessing, Component: id.String(), PID: 4242,
		WorkerJob: "t1", WorkerSeq: 1})
	for _, topic := range []string{queue.JobTopic(h.q1, "t1"), queue.TopicJobs} {
		env, _ := json.Marshal(map[string]any{"topic": topic, "type": health.EventJob, "timestamp": time.Now().UnixMilli(), "data": json.RawMessage(data)})
		if err := rdb.XAdd(ctx(t), &redis.XAddArgs{Stream: h.store.Keys().Events(),
			Values: []string{"topic", topic, "type", health.EventJob, "data", string(env)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The broker has read the change (and failed to read the record) once
	// an entry after it is fanned out.
	seen := h.emit(other.Topic(), "after the change")
	if m := o.next(); m.ID != seen {
		t.Fatalf("got %s %s, want the marker", m.Event, m.Data)
	}
	// Redis answers again.
	if err := rdb.Del(ctx(t), key).Err(); err != nil {
		t.Fatal(err)
	}
	h.seed(id, health.StatusHealthy, nil)
	// No other entry comes: the read is tried again while the stream is
	// idle (after its backoff). Before, nothing came (no event within 10 s).
	m := c.next()
	if w := m.event(t).Worker; m.Event != health.EventWorker || w == nil || w.CurrentJob != "t1" || w.CurrentSeq != 1 || w.Status != "healthy" {
		t.Fatalf("got %s %s, want the worker with t1", m.Event, m.Data)
	}
}

// addProcessing writes a processing event of task, run by process pid of
// id, as a worker writes it (to the job's topic and to queue:jobs), saying
// that id's current job is now current, its seq-th change.
func addProcessing(t *testing.T, h *harness, id health.ComponentID, task string, pid int, current string, seq int64) {
	t.Helper()
	data, _ := json.Marshal(queue.JobEvent{Queue: h.q1, ID: task, State: queue.StateProcessing, Component: id.String(), PID: pid,
		WorkerJob: current, WorkerSeq: seq})
	for _, topic := range []string{queue.JobTopic(h.q1, task), queue.TopicJobs} {
		env, _ := json.Marshal(map[string]any{"topic": topic, "type": health.EventJob, "timestamp": time.Now().UnixMilli(), "data": json.RawMessage(data)})
		if err := h.redis.Client.XAdd(ctx(t), &redis.XAddArgs{Stream: h.store.Keys().Events(),
			Values: []string{"topic", topic, "type", health.EventJob, "data", string(env)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// expectWorkerUpdate reads c's next message, which must be a worker_update
// whose worker ok accepts; what names it in a failure.
func expectWorkerUpdate(t *testing.T, c *sseClient, what string, ok func(*health.WorkerView) bool) {
	t.Helper()
	m := c.next()
	if m.Event != health.EventWorker {
		t.Fatalf("%s: got %s %s", what, m.Event, m.Data)
	}
	if w := m.event(t).Worker; !ok(w) {
		t.Fatalf("%s: got %+v", what, w)
	}
}

// truncateForLog cuts s to n bytes for a failure message.
func truncateForLog(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
