package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/r3labs/sse/v2"

	"github.com/vigil-dev/vigil/health"
)

// workerViews is the broker's view of each worker, so that a worker's
// current job is live (TestCurrentJobLive, TestCurrentJobBrokerOrder): a
// worker changes its current job with one HSET riding in the round trip of
// the job event it writes anyway (processing, done, error), and that job
// event says so (worker_job and worker_seq); the broker turns it into the worker's worker_update, sent
// right after the job event, built from the last worker_update of that
// worker it passed on, with the new current job. The worker writes no
// event of its own: a worker_update is the record as the Go view shows
// it, which a Lua script cannot build, and on a Redis Cluster the record
// and the stream are in different slots.
//
// Order: every worker_update carries the record's rev (raised by every
// write of the record but the current job's, in the script that writes
// it) and current_seq (the number of the current job's change within the
// process). A worker_update whose rev is below the last one passed on for
// that worker is older than what the clients were shown (two writers'
// record writes and their events interleaved: the supervisor's and the
// heartbeat's): it is not sent. One whose current job is older than a
// change already passed on (same process: pid and started_at; lower
// current_seq) is sent with the newer current job. So no event a client
// gets shows an older status or an older current job than an earlier one,
// and the last one matches the record.
//
// A worker the broker has not seen a worker_update of (it started since)
// is read from Redis once, for all such workers of a batch in one round
// trip, when a change of its current job comes. When that read fails, the
// change waits (the last one per worker) and the read is tried again with
// the next batch, or when the stream is idle (the reader's blocking read
// timed out), after a backoff (250 ms doubling to 5 s; meanwhile the
// changes of other workers it has no view of wait too): its worker_update
// then goes out late, with the id of the last entry passed on.
//
// What the derived events are not: entries of the stream. A client that
// catches up from the stream (Last-Event-ID, or after a burst) gets the
// stream's own entries, and the history endpoint lists them; the worker's
// current job there is as of its last worker_update, and its job events
// say the rest.
//
// Only the reader goroutine touches it.
type workerViews struct {
	store *health.Store
	log   *slog.Logger
	m     map[string]*workerView // by component
	// wait holds the last current-job change of each worker without a
	// view whose record could not be read (at most maxWaiting, for
	// waitMax: a record that cannot be read at all, a key of another
	// type, must not fail the reads of the others for good).
	wait map[string]waitingChange
	// readFailed names the workers of the last read, if it failed.
	readFailed map[string]bool
	// After a failed read, none is tried before nextRead (backoff doubles
	// from readBackoffMin to readBackoffMax): a read blocks the fan-out
	// of every client, up to viewReadTimeout, and while a Redis Cluster
	// shard holding records is down the stream still answers.
	nextRead time.Time
	backoff  time.Duration
}

// waitingChange is a change waiting for its worker's record since.
type waitingChange struct {
	jc    jobChange
	since time.Time
}

// maxWaiting and waitMax bound the changes waiting for their worker's
// record.
const (
	maxWaiting = 10_000
	waitMax    = time.Minute
)

// The backoff of the reads of workers after a failed one.
const (
	readBackoffMin = 250 * time.Millisecond
	readBackoffMax = 5 * time.Second
)

type workerView struct {
	v health.WorkerView
	// shown: v was passed on (a view read from the record is not, until
	// the change that had it read).
	shown bool
	// pend is the last current-job change of a process v does not name
	// (its pid comes with a later worker_update).
	pend jobChange
}

// jobChange is what the broker reads of a job event that changed its
// worker's current job.
type jobChange struct {
	Timestamp int64 `json:"timestamp"`
	Data      struct {
		Component string `json:"component"`
		PID       int    `json:"pid"`
		WorkerJob string `json:"worker_job"`
		WorkerSeq int64  `json:"worker_seq"`
	} `json:"data"`
}

// workerSeqMark is what a job event that changed its worker's current job
// contains (queue.JobEvent's worker_seq): others are not decoded.
var workerSeqMark = []byte(`"worker_seq":`)

// readTimeout bounds the read of workers the broker has no view of.
const viewReadTimeout = 2 * time.Second

func newWorkerViews(store *health.Store, log *slog.Logger) *workerViews {
	return &workerViews{store: store, log: log, m: map[string]*workerView{}, wait: map[string]waitingChange{}}
}

// decoded is one entry of a batch as apply reads it.
type decoded struct {
	worker *health.Event // worker_update or worker_removed
	job    *jobChange
}

// apply returns entries with the worker_updates of the current-job
// changes among them added (derived, each right after its job event),
// stale worker_updates marked to drop, and worker_updates whose current
// job is older than one passed on re-framed with the newer one. The
// worker_updates of changes that waited for their worker's record come
// first, with the id last (the last entry passed on). entries may be
// empty (a retry of the waiting ones while the stream is idle).
func (wv *workerViews) apply(ctx context.Context, entries []entry, last streamID) []entry {
	dec := make([]decoded, len(entries))
	var unknown []health.ComponentID
	seen := map[string]bool{}
	var late []string
	now := time.Now()
	for c, w := range wv.wait {
		if wv.m[c] != nil || now.Sub(w.since) > waitMax {
			delete(wv.wait, c)
			continue
		}
		if id, err := health.ParseComponentID(c); err == nil {
			seen[c] = true
			unknown = append(unknown, id)
			late = append(late, c)
		} else {
			delete(wv.wait, c)
		}
	}
	for i, e := range entries {
		if e.ev == nil {
			continue
		}
		switch {
		case (e.typ == health.EventWorker || e.typ == health.EventWorkerRemoved) && strings.HasPrefix(e.topic, "worker:"):
			var ev health.Event
			if json.Unmarshal(e.ev.Data, &ev) == nil && ev.Worker != nil && ev.Worker.Component != "" {
				dec[i].worker = &ev
				seen[ev.Worker.Component] = true
			}
		case e.typ == health.EventJob && strings.HasPrefix(e.topic, "job:") && bytes.Contains(e.ev.Data, workerSeqMark):
			// The job's own topic: its queue:jobs event (the entry's
			// also, or an old worker's second entry) is the same change.
			var jc jobChange
			if json.Unmarshal(e.ev.Data, &jc) != nil || jc.Data.WorkerSeq <= 0 || jc.Data.Component == "" {
				continue
			}
			dec[i].job = &jc
			c := jc.Data.Component
			if wv.m[c] == nil && !seen[c] {
				seen[c] = true
				if id, err := health.ParseComponentID(c); err == nil {
					unknown = append(unknown, id)
				}
			}
		}
	}
	ok := wv.read(ctx, unknown)
	out := make([]entry, 0, len(entries))
	if ok {
		lastEv := []byte(last.String())
		for _, c := range late {
			jc := wv.wait[c].jc
			delete(wv.wait, c)
			if de, ok := wv.change(entry{id: last, ev: &sse.Event{ID: lastEv}}, &jc); ok {
				out = append(out, de)
			}
		}
	}
	for i, e := range entries {
		switch d := dec[i]; {
		case d.worker != nil && e.typ == health.EventWorkerRemoved:
			delete(wv.m, d.worker.Worker.Component)
			delete(wv.wait, d.worker.Worker.Component)
			out = append(out, e)
		case d.worker != nil:
			out = append(out, wv.update(e, d.worker))
		case d.job != nil:
			out = append(out, e)
			if de, ok := wv.change(e, d.job); ok {
				out = append(out, de)
			} else if wv.m[d.job.Data.Component] == nil {
				wv.waitFor(d.job)
			}
		default:
			out = append(out, e)
		}
	}
	return out
}

// waitFor keeps jc, a change of a worker with no view, until a read of
// its record succeeds (or waitMax from the first failed one); not one
// whose record was read and is absent.
func (wv *workerViews) waitFor(jc *jobChange) {
	c := jc.Data.Component
	if wv.readFailed == nil || !wv.readFailed[c] {
		return
	}
	w, ok := wv.wait[c]
	if ok && w.jc.Data.PID == jc.Data.PID && w.jc.Data.WorkerSeq > jc.Data.WorkerSeq {
		return
	}
	if !ok {
		if len(wv.wait) >= maxWaiting {
			return
		}
		w.since = time.Now()
	}
	w.jc = *jc
	wv.wait[c] = w
}

// waiting says whether changes wait for a read of their worker's record.
func (wv *workerViews) waiting() bool { return len(wv.wait) > 0 }

// read seeds the views of workers the broker has none of from their
// records; false when the read failed (readFailed then names them).
func (wv *workerViews) read(ctx context.Context, ids []health.ComponentID) bool {
	clear(wv.readFailed)
	if len(ids) == 0 {
		return true
	}
	failed := func() bool {
		if wv.readFailed == nil {
			wv.readFailed = map[string]bool{}
		}
		for _, id := range ids {
			wv.readFailed[id.String()] = true
		}
		return false
	}
	if time.Now().Before(wv.nextRead) {
		return failed() // the last one failed a moment ago
	}
	rctx, cancel := context.WithTimeout(ctx, viewReadTimeout)
	defer cancel()
	cs, err := wv.store.GetMany(rctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			wv.log.Warn("events: read workers for their current job", "workers", len(ids), "err", err)
		}
		wv.backoff = min(max(2*wv.backoff, readBackoffMin), readBackoffMax)
		wv.nextRead = time.Now().Add(wv.backoff)
		return failed()
	}
	wv.backoff, wv.nextRead = 0, time.Time{}
	for _, c := range cs {
		if c.Status != health.StatusNone {
			wv.m[c.ID.String()] = &workerView{v: c.View()}
		}
	}
	return true
}

// update passes a worker_update on: dropped when older than the view,
// with the view's current job when that is newer.
func (wv *workerViews) update(e entry, ev *health.Event) entry {
	v := *ev.Worker
	st := wv.m[v.Component]
	if st == nil {
		wv.m[v.Component] = &workerView{v: v, shown: true}
		return e
	}
	if v.Rev > 0 && v.Rev < st.v.Rev {
		e.drop = true
		return e
	}
	newer := false
	if sameProcess(st.v, v) && st.v.CurrentSeq > v.CurrentSeq {
		v.CurrentJob, v.CurrentSeq, newer = st.v.CurrentJob, st.v.CurrentSeq, true
	}
	if p := st.pend; p.Data.WorkerSeq > 0 && p.Data.PID == v.PID {
		if p.Data.WorkerSeq > v.CurrentSeq {
			v.CurrentJob, v.CurrentSeq, newer = p.Data.WorkerJob, p.Data.WorkerSeq, true
		}
		st.pend = jobChange{}
	}
	st.v, st.shown = v, true
	if newer {
		out := *ev
		out.Worker = &v
		if data, err := json.Marshal(out); err == nil {
			e.ev = &sse.Event{ID: e.ev.ID, Event: e.ev.Event, Data: data}
		}
	}
	return e
}

// sameProcess says whether two views of a worker are of one process: the
// same pid and the same started_at. A pid alone is not a process: a host
// whose supervisor runs in a container and restarts spawns its workers in a
// fresh pid namespace, in the same order, and a new process numbers its
// current-job changes from 1 again.
func sameProcess(a, b health.WorkerView) bool {
	return a.PID != 0 && a.PID == b.PID && a.StartedAt == b.StartedAt
}

// change applies a current-job change to its worker's view and returns the
// worker_update to send after the job event e, if any.
func (wv *workerViews) change(e entry, jc *jobChange) (entry, bool) {
	st := wv.m[jc.Data.Component]
	if st == nil {
		return entry{}, false // no record, or it could not be read
	}
	switch {
	case jc.Data.PID != 0 && jc.Data.PID == st.v.PID:
		if jc.Data.WorkerSeq <= st.v.CurrentSeq && st.shown {
			return entry{}, false // an older change, or this one's other event
		}
		if jc.Data.WorkerSeq > st.v.CurrentSeq {
			st.v.CurrentJob, st.v.CurrentSeq = jc.Data.WorkerJob, jc.Data.WorkerSeq
		}
	default:
		// A process the view does not name yet (its worker_update comes
		// later), or an old one's late event.
		if st.pend.Data.PID != jc.Data.PID || jc.Data.WorkerSeq > st.pend.Data.WorkerSeq {
			st.pend = *jc
		}
		if st.shown {
			return entry{}, false
		}
	}
	st.shown = true
	v := st.v
	ts := jc.Timestamp
	if ts == 0 {
		ts = time.Now().UnixMilli()
	}
	id, err := health.ParseComponentID(v.Component)
	if err != nil {
		return entry{}, false
	}
	data, err := json.Marshal(health.Event{Topic: id.Topic(), Type: health.EventWorker, Timestamp: ts, Worker: &v})
	if err != nil {
		return entry{}, false
	}
	return entry{id: e.id, topic: id.Topic(), typ: health.EventWorker, derived: true,
		ev: &sse.Event{ID: e.ev.ID, Event: []byte(health.EventWorker), Data: data}}, true
}
