//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// A page that catches up from the stream (it reconnected with
// Last-Event-ID) gets the stream's own entries, which the broker re-frames
// only live: a supervisor's worker_update written before a change of the
// worker's current job, and reaching the stream after it, carries the
// older current job. The page kept the newer one (as the broker does live);
// before, it showed the older job, finished, until the worker's next
// change.
func TestDashboardCurrentJobAfterCatchUp(t *testing.T) {
	chromium(t)
	f := newFleet(t, 10)
	w := f.workers[1] // healthy
	ctx, problems := browser(t)
	p := &page{t: t, ctx: ctx, base: f.base}
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/#/workers")); err != nil {
		t.Fatal(err)
	}
	row := `document.querySelector('#workers tbody tr[data-component="` + w.ID.String() + `"]')`
	cell := row + `.querySelector('td.job').textContent`
	bg := context.Background()
	rdb := f.store.Client()
	job := func(task string, seq int64) {
		t.Helper()
		data, _ := json.Marshal(queue.JobEvent{Queue: w.ID.Queue, ID: task, State: queue.StateProcessing, Component: w.ID.String(), PID: w.PID,
			WorkerJob: task, WorkerSeq: seq})
		// One entry under the job's topic, also queue:jobs's, as a worker
		// writes it (health.EntryAlso).
		topic := queue.JobTopic(w.ID.Queue, task)
		env, _ := json.Marshal(map[string]any{"topic": topic, "type": health.EventJob, "timestamp": time.Now().UnixMilli(), "data": json.RawMessage(data)})
		pipe := rdb.Pipeline()
		f.store.AddEncodedEventTo(bg, pipe, topic, queue.TopicJobs, health.EventJob, string(env))
		if _, err := pipe.Exec(bg); err != nil {
			t.Fatal(err)
		}
	}
	p.poll("the worker's row", row+` !== null && `+cell+` === ''`)
	job("j5", 5)
	p.poll("its current job, live", cell+` === 'j5'`)

	// The page loses its stream, and cannot get it back for a while.
	f.eventsDown.Store(true)
	f.cutClients()
	p.poll("the page knows", `document.querySelector('#conn').dataset.state === 'reconnecting'`)
	// Meanwhile: the worker starts j7 (its record then says j7, change 7);
	// the supervisor's write of a reason, whose script read the record
	// just before (j6, change 6), reaches the stream after j7's event.
	rec, err := f.store.Get(bg, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	job("j7", 7)
	c := rec
	c.Reason, c.Rev, c.CurrentJob, c.CurrentSeq = "caught up", rec.Rev+5, "j6", 6
	if _, err := f.store.AddEvent(bg, health.WorkerEvent(c, time.Now())); err != nil {
		t.Fatal(err)
	}
	f.eventsDown.Store(false)
	p.poll("the page caught up", `document.querySelector('#conn').dataset.state === 'live' && `+row+`.textContent.includes('caught up')`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](cell))
	if err != nil {
		t.Fatal(err)
	}
	if got != "j7" {
		t.Errorf("current job after the catch-up: %q, want j7 (the worker_update before it carried j6)", got)
	}
	for _, pr := range problems() {
		// The stream cut, and refused while down: the test's doing.
		if !strings.Contains(pr, "ERR_INCOMPLETE_CHUNKED_ENCODING") && !strings.Contains(pr, "503") {
			t.Errorf("the page reported a problem: %s", pr)
		}
	}
}
