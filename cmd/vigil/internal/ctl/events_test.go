package ctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/cmd/vigil/internal/ctl"
)

// fakeStream serves the SSE protocol of docs/design.md §8: the first connection
// sends a snapshot and one change, then drops; the reconnection must carry
// Last-Event-ID and gets the next change.
func fakeStream(t *testing.T) (*httptest.Server, *[]*http.Request) {
	var mu sync.Mutex
	var reqs []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, r.Clone(r.Context()))
		mu.Unlock()
		if r.URL.Path != "/api/v1/events" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"status":401,"detail":"a bearer token is required"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		worker := func(id, typ, status string) {
			d, _ := json.Marshal(map[string]any{"topic": "worker:tag:0:status", "type": typ, "timestamp": 1790000000000,
				"worker": map[string]any{"component": "worker:tag:0", "status": status, "pid": 42, "host": "h1"}})
			fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, typ, d)
		}
		switch r.Header.Get("Last-Event-ID") {
		case "":
			fmt.Fprint(w, ": keep-alive\n\n")
			worker("1-0", "snapshot", "healthy")
			worker("2-0", "worker_update", "crashed")
		default:
			if got := r.Header.Get("Last-Event-ID"); got != "2-0" {
				http.Error(w, "resumed from "+got, http.StatusBadRequest)
				return
			}
			job, _ := json.Marshal(map[string]any{"topic": "queue:jobs", "type": "job_update", "timestamp": 1790000000001,
				"data": map[string]any{"queue": "tag", "id": "t1", "task_type": "demo:work", "state": "done"}})
			fmt.Fprintf(w, "id: 3-0\nevent: job_update\ndata: %s\n\n", job)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &reqs
}

func TestEventsFollowsAndResumes(t *testing.T) {
	srv, reqs := fakeStream(t)
	env := map[string]string{ctl.EnvServer: srv.URL, ctl.EnvToken: token}
	code, out, errs := runCtl(t, env, "events", "worker:*:status", "queue:jobs", "--limit", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "snapshot") || !strings.Contains(lines[0], "healthy on h1 pid 42") ||
		!strings.Contains(lines[1], "worker_update") || !strings.Contains(lines[1], "crashed") ||
		!strings.Contains(lines[2], "job_update") || !strings.Contains(lines[2], "done demo:work t1") {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(errs, "reconnecting") {
		t.Errorf("the reconnection was not said: %q", errs)
	}
	first := (*reqs)[0]
	if got := first.URL.Query()["topic"]; len(got) != 2 || got[0] != "worker:*:status" || got[1] != "queue:jobs" {
		t.Errorf("topics sent: %v", got)
	}
	if first.Header.Get("Accept") != "text/event-stream" {
		t.Errorf("Accept %q", first.Header.Get("Accept"))
	}

	code, out, _ = runCtl(t, env, "events", "--json", "--limit", "1")
	var m struct {
		ID, Event string
		Data      struct{ Topic string }
	}
	if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil || m.ID == "" || m.Data.Topic == "" {
		t.Fatalf("events --json: exit %d %v\n%s", code, err, out)
	}

	code, _, errs = runCtl(t, map[string]string{ctl.EnvServer: srv.URL}, "events")
	if code != 1 || !strings.Contains(errs, "401") {
		t.Fatalf("without a token: exit %d %s", code, errs)
	}
}

// Against the real admin server: the snapshot of each worker first.
func TestEventsLive(t *testing.T) {
	l := newLive(t)
	resp, err := http.Get(l.url + "/api/v1/events?topic=nosuch")
	if err == nil {
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode == http.StatusNotFound {
		t.Skip("this admin server has no GET /api/v1/events yet")
	}
	out := l.must([]string{"snapshot", "worker:tag:0:status", "worker:tag:1:status", "healthy"},
		"events", "worker:tag:*:status", "--limit", "2")
	if strings.Count(out, "\n") != 2 {
		t.Fatalf("want 2 lines:\n%s", out)
	}
}

func TestQueueEventSummary(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "id: 1-0\nevent: queue_update\ndata: {\"topic\":\"queue:tag:status\",\"type\":\"queue_update\",\"timestamp\":1,\"data\":{\"queue\":\"tag\",\"pending\":15,\"running\":2,\"completed\":32,\"processed_total\":40,\"failed_total\":3,\"paused\":true,\"paused_by\":\"asynq\",\"live_workers\":2}}\n\n")
	}))
	defer srv.Close()
	code, out, errs := runCtl(t, map[string]string{ctl.EnvServer: srv.URL}, "events", "--limit", "1")
	if code != 0 || !strings.Contains(out, "15 pending, 2 running, 0 retry, 0 archived, 32 completed (kept), 40 processed_total, 3 failed_total, 2 workers, paused by asynq") {
		t.Fatalf("exit %d %s\n%s", code, errs, out)
	}
}

// Against the real admin server, job events as workers write them (one
// stream entry, also queue:jobs): each printed under the job's topic and
// under queue:jobs, once each, the second with the entry's id and .1.
func TestEventsLiveJobEvents(t *testing.T) {
	l := newLive(t)
	type res struct {
		code      int
		out, errs string
	}
	ended := make(chan res, 1)
	go func() {
		code, out, errs := l.ctl("events", "job:*", "queue:jobs", "--json", "--limit", "5")
		ended <- res{code, out, errs}
	}()
	// Written until it has its five (it connects at some point between
	// two): the snapshot of queue:jobs, then two entries' four events.
	var r res
	for i := 0; ; i++ {
		task := fmt.Sprint("t", i)
		data, _ := json.Marshal(map[string]any{"topic": "job:tag:" + task, "type": "job_update", "timestamp": 1790000000000 + i,
			"data": map[string]any{"queue": "tag", "id": task, "state": "done"}})
		pipe := l.rdb.Pipeline()
		l.store.AddEncodedEventTo(context.Background(), pipe, "job:tag:"+task, "queue:jobs", "job_update", string(data))
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case r = <-ended:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errs)
	}
	var got []sseMessage
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var m sseMessage
		decode(t, line, &m)
		got = append(got, m)
	}
	if len(got) != 5 || got[0].Event != "snapshot" || got[0].Data.Topic != "queue:jobs" {
		t.Fatalf("output:\n%s", r.out)
	}
	for i := 1; i < 5; i += 2 {
		own, also := got[i], got[i+1]
		if own.Event != "job_update" || !strings.HasPrefix(own.Data.Topic, "job:tag:t") || also.Event != "job_update" ||
			also.Data.Topic != "queue:jobs" || also.ID != own.ID+".1" || own.Data.Data.ID != also.Data.Data.ID {
			t.Fatalf("events %d and %d: %+v %+v\n%s", i, i+1, own, also, r.out)
		}
	}
	if got[1].Data.Data.ID == got[3].Data.Data.ID {
		t.Fatalf("one entry twice:\n%s", r.out)
	}
}

// sseMessage is a line of `vigil ctl events --json`.
type sseMessage struct {
	ID, Event string
	Data      struct {
		Topic string
		Data  struct{ ID string }
	}
}
