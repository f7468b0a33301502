package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// addEvents appends events to the test's stream and returns their ids.
func (h *harness) addEvents(es ...health.Event) []string {
	h.tb.Helper()
	ids := make([]string, len(es))
	for i, e := range es {
		id, err := h.store.AddEvent(ctx(h.tb), e)
		if err != nil {
			h.tb.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func historyOf(t *testing.T, h *harness, query string) server.History {
	t.Helper()
	return decode[server.History](t, h.get("/api/v1/events/history?"+query), http.StatusOK)
}

func ids(es []server.HistoryEvent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func jobEvent(q, id, state string) health.Event {
	data, _ := json.Marshal(map[string]any{"queue": q, "id": id, "state": state})
	return health.Event{Topic: "job:" + q + ":" + id, Type: health.EventJob, Timestamp: time.Now().UnixMilli(), Data: data}
}

// TestHistoryOfAJobAndAWorker: a job's events and a worker's past
// statuses come back oldest first, with their payloads, and nothing of
// other topics.
func TestHistoryOfAJobAndAWorker(t *testing.T) {
	h := newHarness(t, setup{})
	crashed := health.Component{ID: h.id(0), Status: health.StatusCrashed, HasExit: true, ExitCode: 137, Signal: "SIGKILL", Reason: "killed by SIGKILL"}
	healthy := health.Component{ID: h.id(0), Status: health.StatusHealthy, PID: 42}
	got := h.addEvents(
		jobEvent(h.q1, "a", "created"),
		jobEvent(h.q1, "b", "created"),
		health.WorkerEvent(crashed, time.Now()),
		jobEvent(h.q1, "a", "processing"),
		health.WorkerEvent(healthy, time.Now()),
		jobEvent(h.q1, "a", "error"),
		health.Event{Topic: "job:" + h.q1 + ":a", Type: health.EventAction, Timestamp: time.Now().UnixMilli(), Action: &health.ActionView{Action: "retry", Target: "a"}},
	)

	job := historyOf(t, h, "topic=job:"+h.q1+":a")
	if want := []string{got[0], got[3], got[5], got[6]}; strings.Join(ids(job.Events), " ") != strings.Join(want, " ") || job.More {
		t.Fatalf("job a's history: %v (more %v), want %v", ids(job.Events), job.More, want)
	}
	var first struct{ State string }
	if err := json.Unmarshal(job.Events[2].Data, &first); err != nil || first.State != "error" || job.Events[2].Type != "job_update" {
		t.Errorf("job a's third event: %+v (%s)", job.Events[2], job.Events[2].Data)
	}
	if a := job.Events[3].Action; a == nil || a.Action != "retry" {
		t.Errorf("job a's action event: %+v", job.Events[3])
	}

	w := historyOf(t, h, "topic="+url.QueryEscape(h.id(0).Topic()))
	if len(w.Events) != 2 || w.Events[0].Worker == nil || w.Events[1].Worker == nil {
		t.Fatalf("worker history: %+v", w.Events)
	}
	if c := w.Events[0].Worker; c.Status != "crashed" || c.ExitCode == nil || *c.ExitCode != 137 || c.Signal != "SIGKILL" || c.Reason != "killed by SIGKILL" {
		t.Errorf("the crash: %+v", c)
	}
	if c := w.Events[1].Worker; c.Status != "healthy" || c.PID != 42 {
		t.Errorf("the restart: %+v", c)
	}
	// Patterns as in the event stream: every job of q1.
	if all := historyOf(t, h, "topic=job:"+h.q1+":*"); len(all.Events) != 5 {
		t.Errorf("job:%s:* = %d events, want 5", h.q1, len(all.Events))
	}
}

// TestHistoryPagesBackAndSince: limit keeps the newest events and says
// where the next page ends; paging back with before returns the rest,
// once; since bounds the answer and from says what it covers.
func TestHistoryPagesBackAndSince(t *testing.T) {
	h := newHarness(t, setup{})
	var es []health.Event
	for i := range 7 {
		es = append(es, jobEvent(h.q1, "j", strconv.Itoa(i)))
	}
	got := h.addEvents(es...)
	q := "topic=job:" + h.q1 + ":j&limit=3"

	var pages [][]string
	before := ""
	for range 5 {
		p := historyOf(t, h, q+before)
		pages = append(pages, ids(p.Events))
		if !p.More {
			break
		}
		if p.NextBefore != p.Events[0].ID {
			t.Errorf("next_before %s, want the oldest event of the page %s", p.NextBefore, p.Events[0].ID)
		}
		before = "&before=" + p.NextBefore
	}
	want := [][]string{got[4:7], got[1:4], got[0:1]}
	if fmt.Sprint(pages) != fmt.Sprint(want) {
		t.Errorf("pages %v, want %v", pages, want)
	}

	// since: only what is at or after it; from is since itself when the
	// stream holds older entries.
	ms, _ := strconv.ParseInt(strings.Split(got[3], "-")[0], 10, 64)
	p := historyOf(t, h, "topic=job:"+h.q1+":j&since="+strconv.FormatInt(ms, 10))
	for _, e := range p.Events {
		if e.ID < got[3] && strings.Split(e.ID, "-")[0] != strconv.FormatInt(ms, 10) {
			t.Errorf("event %s is older than since=%d", e.ID, ms)
		}
	}
	if len(p.Events) < 4 || p.Events[len(p.Events)-1].ID != got[6] || p.More || p.From != ms {
		t.Errorf("since=%d: %v more=%v from=%d", ms, ids(p.Events), p.More, p.From)
	}
	// since before the stream's first entry: from is that entry's time.
	first, err := h.redis.Client.XRangeN(ctx(t), h.store.Keys().Events(), "-", "+", 1).Result()
	if err != nil {
		t.Fatal(err)
	}
	firstMS, _ := strconv.ParseInt(strings.Split(first[0].ID, "-")[0], 10, 64)
	if p := historyOf(t, h, "topic=nothing&since=1"); len(p.Events) != 0 || p.More || p.From != firstMS {
		t.Errorf("since=1: %+v, want from=%d", p, firstMS)
	}
}

// TestHistoryReadsAtMostScanMax: past the scan cap (HistoryScanMax,
// lowered here to keep the test quick) one request stops and says where
// to go on; the next request finds the older match.
func TestHistoryReadsAtMostScanMax(t *testing.T) {
	const scanMax = 1200 // more than two pages of XREVRANGE
	t.Cleanup(server.SetHistoryScanMax(scanMax))
	h := newHarness(t, setup{})
	old := h.addEvents(jobEvent(h.q1, "old", "created"))[0]
	key := h.store.Keys().Events()
	for added := 0; added < scanMax+10; {
		pipe := h.redis.Client.Pipeline()
		for range 500 {
			pipe.XAdd(ctx(t), &redis.XAddArgs{Stream: key, Values: []string{"topic", "queue:jobs", "type", "job_update", "data", "{}"}})
			added++
		}
		if _, err := pipe.Exec(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	p := historyOf(t, h, "topic=job:"+h.q1+":old")
	if len(p.Events) != 0 || !p.More || p.NextBefore == "" {
		t.Fatalf("first request: %d events, more %v, next_before %q", len(p.Events), p.More, p.NextBefore)
	}
	p = historyOf(t, h, "topic=job:"+h.q1+":old&before="+p.NextBefore)
	if len(p.Events) != 1 || p.Events[0].ID != old || p.More {
		t.Errorf("second request: %v more %v, want [%s]", ids(p.Events), p.More, old)
	}
}

func TestHistoryRefusesBadInput(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true }})
	for _, q := range []string{"topic=a::b", "topic=a*", "before=x", "before=1-2-3", "limit=0", "limit=1001", "since=-1"} {
		rec := h.do(req{method: http.MethodGet, path: "/api/v1/events/history?" + q, token: testToken})
		if rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", q, rec.Code)
		}
	}
	if rec := h.do(req{method: http.MethodGet, path: "/api/v1/events/history"}); rec.Code != http.StatusUnauthorized {
		t.Errorf("auth_reads without a token: %d, want 401", rec.Code)
	}
}
