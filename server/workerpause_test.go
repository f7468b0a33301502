package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// Pausing one worker through the API: the worker's view says so (who,
// why), a second pause keeps the first's who and why, resume lifts it;
// an unknown worker is a 404, a malformed id a 422; the action is an
// event on the worker's topic.
func TestPauseOneWorker(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	h.seed(id, health.StatusHealthy, nil)
	h.seed(h.id(1), health.StatusHealthy, nil)
	path := "/api/v1/workers/" + id.String()
	a := decode[server.WorkerAction](t, h.post(path+"/pause?by=alice&reason=disk+check", ""), http.StatusOK)
	if a.Action != "pause" || !a.Worker.Paused || a.Worker.PausedBy != "alice" || a.Worker.PauseReason != "disk check" || a.Worker.PausedAt == 0 {
		t.Fatalf("pause: %+v", a)
	}
	again := decode[server.WorkerAction](t, h.post(path+"/pause?by=bob", ""), http.StatusOK)
	if !strings.Contains(again.Message, "already") || again.Worker.PausedBy != "alice" {
		t.Errorf("second pause: %+v", again)
	}
	w := decode[server.Worker](t, h.get(path), http.StatusOK)
	if !w.Paused || w.PausedBy != "alice" {
		t.Errorf("GET worker: %+v", w)
	}
	list := decode[server.WorkerList](t, h.get("/api/v1/workers"), http.StatusOK)
	paused := 0
	for _, w := range list.Workers {
		if w.Paused {
			paused++
		}
	}
	if paused != 1 {
		t.Errorf("workers listed paused: %d, want 1", paused)
	}
	r := decode[server.WorkerAction](t, h.post(path+"/resume", ""), http.StatusOK)
	if r.Worker.Paused || r.Action != "resume" {
		t.Errorf("resume: %+v", r)
	}
	if r := decode[server.WorkerAction](t, h.post(path+"/resume", ""), http.StatusOK); !strings.Contains(r.Message, "not paused") {
		t.Errorf("second resume: %+v", r)
	}
	wantProblem(t, h.post("/api/v1/workers/"+h.id(7).String()+"/pause", ""), http.StatusNotFound)
	wantProblem(t, h.post("/api/v1/workers/worker:Bad%20Id:0/pause", ""), http.StatusUnprocessableEntity)
	msgs, err := h.redis.Client.XRange(ctx(t), h.store.Keys().Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	actions := 0
	for _, m := range msgs {
		var e health.Event
		if m.Values["topic"] != id.Topic() || json.Unmarshal([]byte(m.Values["data"].(string)), &e) != nil {
			continue
		}
		if e.Action != nil && (e.Action.Action == "pause" || e.Action.Action == "resume") {
			actions++
		}
	}
	if actions != 2 {
		t.Errorf("pause/resume events on %s: %d, want 2 (no event when nothing changed)", id.Topic(), actions)
	}
}
