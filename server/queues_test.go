package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

type queuesBody struct {
	Queues       []server.QueueStats `json:"queues"`
	Total        server.QueueStats   `json:"total"`
	GlobalPaused bool                `json:"global_paused"`
}

func TestQueuesBeforeAnyTask(t *testing.T) {
	h := newHarness(t, setup{})
	b := decode[queuesBody](t, h.get("/api/v1/queues"), http.StatusOK)
	if len(b.Queues) != 2 || b.Queues[0].Queue != h.q2 || b.Queues[1].Queue != h.q1 || b.Queues[0].Pending != 0 || b.GlobalPaused {
		t.Fatalf("queues = %+v", b)
	}
	q := decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK)
	if q.Queue != h.q1 || q.Paused {
		t.Errorf("queue = %+v", q)
	}
	wantProblem(t, h.get("/api/v1/queues/other"), http.StatusNotFound)
	wantProblem(t, h.get("/api/v1/queues/Not_A_Queue"), http.StatusUnprocessableEntity)
}

func TestQueueStatsCountTasksAndLiveWorkers(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	h.seed(h.id(1), health.StatusCrashed, nil)
	for range 3 {
		decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t"}`), http.StatusCreated)
	}
	q := decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK)
	if q.Pending != 3 || q.LiveWorkers != 1 {
		t.Errorf("queue = %+v, want 3 pending and 1 live worker", q)
	}
	b := decode[queuesBody](t, h.get("/api/v1/queues"), http.StatusOK)
	if b.Total.Pending != 3 || b.Total.LiveWorkers != 1 {
		t.Errorf("total = %+v", b.Total)
	}
}

func TestPauseResume(t *testing.T) {
	h := newHarness(t, setup{})
	paused := func(q string) bool {
		t.Helper()
		b := decode[server.QueueStats](t, h.get("/api/v1/queues/"+q), http.StatusOK)
		return b.Paused
	}
	asynqPaused := func(q string) bool {
		t.Helper()
		// asynq's own flag, as the workers see it.
		return h.redis.Client.Exists(ctx(t), "asynq:{"+q+"}:paused").Val() == 1
	}

	r := decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/pause", ""), http.StatusOK)
	if !r.Changed || !r.Paused || r.Queue != h.q1 || strings.Contains(r.Message, "already") {
		t.Fatalf("pause = %+v", r)
	}
	if !paused(h.q1) || paused(h.q2) || !asynqPaused(h.q1) {
		t.Fatal("pause did not pause only its queue")
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/pause", ""), http.StatusOK)
	if r.Changed || !strings.Contains(r.Message, "already paused") {
		t.Fatalf("second pause = %+v, want a 200 that says already paused", r)
	}

	// Global pause; global resume leaves q1 paused on its own.
	r = decode[server.PauseResult](t, h.post("/api/v1/pause", ""), http.StatusOK)
	if !r.Changed || !r.Paused || !paused(h.q2) || !asynqPaused(h.q2) {
		t.Fatalf("global pause = %+v", r)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/pause", ""), http.StatusOK)
	if r.Changed || !strings.Contains(r.Message, "already") {
		t.Fatalf("second global pause = %+v", r)
	}
	// Resuming q1 while globally paused: still paused.
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/resume", ""), http.StatusOK)
	if !r.Changed || !r.Paused || !paused(h.q1) {
		t.Fatalf("resume under global pause = %+v", r)
	}
	decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/pause", ""), http.StatusOK)
	r = decode[server.PauseResult](t, h.post("/api/v1/resume", ""), http.StatusOK)
	if !r.Changed || r.Paused || !paused(h.q1) || paused(h.q2) || asynqPaused(h.q2) {
		t.Fatalf("global resume = %+v; q1 paused %v, q2 paused %v", r, paused(h.q1), paused(h.q2))
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/resume", ""), http.StatusOK)
	if r.Changed {
		t.Fatalf("second global resume = %+v", r)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/resume", ""), http.StatusOK)
	if !r.Changed || r.Paused || paused(h.q1) || asynqPaused(h.q1) {
		t.Fatalf("resume = %+v", r)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/resume", ""), http.StatusOK)
	if r.Changed {
		t.Fatalf("second resume = %+v", r)
	}
	if b := decode[queuesBody](t, h.get("/api/v1/queues"), http.StatusOK); b.GlobalPaused {
		t.Error("global_paused after resume")
	}

	// Unknown queues: 404, nothing written.
	before := h.dump()
	for _, a := range []string{"pause", "resume"} {
		wantProblem(t, h.post("/api/v1/queues/other/"+a, ""), http.StatusNotFound)
		wantProblem(t, h.post("/api/v1/queues/BAD:Q/"+a, ""), http.StatusUnprocessableEntity)
	}
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("rejected pauses wrote: %v", d)
	}
}

// TestPauseByAsynq: a pause made with asynq's own Inspector is shown
// paused by asynq; Vigil's resume lifts it and says whose it was; a Vigil
// pause lifted with the Inspector shows running.
func TestPauseByAsynq(t *testing.T) {
	h := newHarness(t, setup{})
	insp := asynq.NewInspectorFromRedisClient(h.redis.Client)
	if err := insp.PauseQueue(h.q1); err != nil {
		t.Fatal(err)
	}
	q := decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK)
	if !q.Paused || q.PausedBy != "asynq" || q.PausedAt == 0 {
		t.Fatalf("asynq's pause shows as %+v", q)
	}
	r := decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/pause", ""), http.StatusOK)
	if r.Changed || !strings.Contains(r.Message, "by asynq's tools") {
		t.Fatalf("pause over asynq's pause = %+v", r)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/resume", ""), http.StatusOK)
	if !r.Changed || r.Paused || !strings.Contains(r.Message, "paused by asynq's tools; resumed") {
		t.Fatalf("resume of asynq's pause = %+v", r)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/pause?by=ann&reason=deploy", ""), http.StatusOK)
	if !r.Changed {
		t.Fatalf("pause = %+v", r)
	}
	q = decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK)
	if !q.Paused || q.PausedBy != "vigil" || q.PausedWho != "ann" || q.PauseReason != "deploy" {
		t.Fatalf("Vigil's pause shows as %+v", q)
	}
	if err := insp.UnpauseQueue(h.q1); err != nil {
		t.Fatal(err)
	}
	if q := decode[server.QueueStats](t, h.get("/api/v1/queues/"+h.q1), http.StatusOK); q.Paused || q.PausedBy != "" {
		t.Fatalf("after asynq's unpause: %+v", q)
	}
	r = decode[server.PauseResult](t, h.post("/api/v1/queues/"+h.q1+"/resume", ""), http.StatusOK)
	if r.Changed || !strings.Contains(r.Message, "asynq's tools had already resumed it") {
		t.Fatalf("resume after asynq's unpause = %+v", r)
	}
}
