package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/server"
)

type jobsBody struct {
	Queue string       `json:"queue"`
	State string       `json:"state"`
	Jobs  []server.Job `json:"jobs"`
}

func TestEnqueueAndLookUp(t *testing.T) {
	h := newHarness(t, setup{})
	rec := h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"email:send","payload":{"to":"a@b.c"},"max_retry":3}`)
	j := decode[server.Job](t, rec, http.StatusCreated)
	if j.ID == "" || j.Queue != h.q1 || j.Type != "email:send" || j.State != "pending" || j.MaxRetry != 3 || string(j.Payload) != `{"to":"a@b.c"}` {
		t.Fatalf("enqueued = %+v", j)
	}
	if loc := rec.Header().Get("Location"); loc != "api/v1/jobs/"+h.q1+"/"+j.ID {
		t.Errorf("Location = %q", loc)
	}
	got := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+j.ID), http.StatusOK)
	if got.ID != j.ID || got.State != "pending" {
		t.Errorf("looked up = %+v", got)
	}

	// Delayed, with an id of our own.
	s := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","task_id":"my-task.1","delay_seconds":3600}`), http.StatusCreated)
	if s.ID != "my-task.1" || s.State != "scheduled" {
		t.Fatalf("scheduled = %+v", s)
	}
	wantProblem(t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","task_id":"my-task.1"}`), http.StatusConflict)
	decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"u","payload":1,"unique_seconds":60}`), http.StatusCreated)
	wantProblem(t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"u","payload":1,"unique_seconds":60}`), http.StatusConflict)

	for state, n := range map[string]int{"pending": 2, "scheduled": 1, "active": 0, "retry": 0, "archived": 0, "completed": 0} {
		b := decode[jobsBody](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state="+state), http.StatusOK)
		if len(b.Jobs) != n || b.State != state {
			t.Errorf("state %s: %d jobs, want %d", state, len(b.Jobs), n)
		}
	}
	if b := decode[jobsBody](t, h.get("/api/v1/queues/"+h.q1+"/jobs"), http.StatusOK); b.State != "pending" || len(b.Jobs) != 2 {
		t.Errorf("default state: %+v", b)
	}
	if b := decode[jobsBody](t, h.get("/api/v1/queues/"+h.q2+"/jobs?state=archived"), http.StatusOK); len(b.Jobs) != 0 {
		t.Errorf("queue asynq never saw: %+v", b)
	}
	wantProblem(t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=lost"), http.StatusUnprocessableEntity)
	wantProblem(t, h.get("/api/v1/queues/"+h.q1+"/jobs?page=0"), http.StatusUnprocessableEntity)
	wantProblem(t, h.get("/api/v1/queues/other/jobs"), http.StatusNotFound)
	wantProblem(t, h.get("/api/v1/jobs/"+h.q1+"/nope"), http.StatusNotFound)
	wantProblem(t, h.get("/api/v1/jobs/"+h.q2+"/nope"), http.StatusNotFound)
	wantProblem(t, h.get("/api/v1/jobs/other/"+j.ID), http.StatusNotFound)
}

func TestEnqueueBadInput(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.MaxPayload = 100 }})
	path := "/api/v1/queues/" + h.q1 + "/jobs"
	tests := []struct {
		name, body string
		status     int
	}{
		{"negative delay", `{"type":"t","delay_seconds":-1}`, 422},
		{"negative max_retry", `{"type":"t","max_retry":-5}`, 422},
		{"negative timeout", `{"type":"t","timeout_seconds":-0.5}`, 422},
		{"no type", `{"payload":{}}`, 422},
		{"empty type", `{"type":""}`, 422},
		{"type with spaces", `{"type":"a b"}`, 422},
		{"bad task id", `{"type":"t","task_id":"../x"}`, 422},
		{"unknown field", `{"type":"t","priority":9}`, 422},
		{"payload over the limit", `{"type":"t","payload":"` + strings.Repeat("x", 200) + `"}`, 422},
		{"string for a number", `{"type":"t","delay_seconds":"soon"}`, 422},
		{"invalid JSON", `{"type":`, 400},
		{"not an object", `[1,2]`, 422},
		{"empty body", ``, 400},
	}
	before := h.dump()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(req{method: http.MethodPost, path: path, body: tt.body, token: testToken, ctype: "application/json"})
			wantProblem(t, rec, tt.status)
		})
	}
	wantProblem(t, h.post("/api/v1/queues/other/jobs", `{"type":"t"}`), http.StatusNotFound)
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("rejected enqueues wrote: %v", d)
	}
}

func TestJobActions(t *testing.T) {
	h := newHarness(t, setup{})
	enqueue := func(body string) server.Job {
		t.Helper()
		return decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", body), http.StatusCreated)
	}
	jobPath := func(j server.Job) string { return "/api/v1/jobs/" + h.q1 + "/" + j.ID }

	p := enqueue(`{"type":"t"}`)
	// Retry of a pending job: 409. Cancel: archived. Cancel again: 409.
	wantProblem(t, h.post(jobPath(p)+"/retry", ""), http.StatusConflict)
	a := decode[server.JobAction](t, h.post(jobPath(p)+"/cancel", ""), http.StatusOK)
	if a.Action != "cancel" || a.Job == nil || a.Job.State != "archived" {
		t.Fatalf("cancel = %+v", a)
	}
	wantProblem(t, h.post(jobPath(p)+"/cancel", ""), http.StatusConflict)
	// Retry of the archived job: pending again.
	a = decode[server.JobAction](t, h.post(jobPath(p)+"/retry", ""), http.StatusOK)
	if a.Job == nil || a.Job.State != "pending" {
		t.Fatalf("retry = %+v", a)
	}
	// Delete: 204, then 404.
	rec := h.do(req{method: http.MethodDelete, path: jobPath(p), token: testToken})
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do(req{method: http.MethodDelete, path: jobPath(p), token: testToken}), http.StatusNotFound)
	for _, a := range []string{"retry", "cancel"} {
		wantProblem(t, h.post(jobPath(p)+"/"+a, ""), http.StatusNotFound)
		wantProblem(t, h.post("/api/v1/jobs/other/x/"+a, ""), http.StatusNotFound)
	}
}

// TestArchivedToxicJob runs an asynq server whose handler archives its
// task as toxic the way package queue does, and an active job to cancel
// and to refuse to delete.
func TestArchivedToxicAndActiveJobs(t *testing.T) {
	h := newHarness(t, setup{})
	release := make(chan struct{})
	started := make(chan string, 1)
	srv := asynq.NewServerFromRedisClient(h.redis.Client, asynq.Config{
		Queues: map[string]int{h.q1: 1}, Concurrency: 2, LogLevel: asynq.FatalLevel,
		Logger: slogLogger{}, ShutdownTimeout: 5 * time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("toxic", func(context.Context, *asynq.Task) error {
		return fmt.Errorf("toxic: worker crashed 3 times: %w", asynq.SkipRetry)
	})
	mux.HandleFunc("slow", func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	defer close(release)

	tox := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"toxic","max_retry":0}`), http.StatusCreated)
	slow := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"slow","max_retry":0}`), http.StatusCreated)
	select {
	case id := <-started:
		if id != slow.ID {
			t.Fatalf("started %s, want %s", id, slow.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the slow job did not start")
	}
	// The toxic job is archived with its reason.
	deadline := time.Now().Add(20 * time.Second)
	var b jobsBody
	for {
		b = decode[jobsBody](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=archived"), http.StatusOK)
		if len(b.Jobs) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // asynq's server, not ours, moves it
	}
	if len(b.Jobs) != 1 || b.Jobs[0].ID != tox.ID || !b.Jobs[0].Toxic || !strings.HasPrefix(b.Jobs[0].ToxicReason, "toxic: worker crashed 3 times") {
		t.Fatalf("archived = %+v", b.Jobs)
	}

	active := decode[jobsBody](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=active"), http.StatusOK)
	if len(active.Jobs) != 1 || active.Jobs[0].ID != slow.ID {
		t.Fatalf("active = %+v", active.Jobs)
	}
	slowPath := "/api/v1/jobs/" + h.q1 + "/" + slow.ID
	wantProblem(t, h.do(req{method: http.MethodDelete, path: slowPath, token: testToken}), http.StatusConflict)
	wantProblem(t, h.post(slowPath+"/retry", ""), http.StatusConflict)
	a := decode[server.JobAction](t, h.post(slowPath+"/cancel", ""), http.StatusOK)
	if a.Action != "cancel" || !strings.Contains(a.Message, "cancellation sent") {
		t.Fatalf("cancel active = %+v", a)
	}
}

// slogLogger silences asynq.
type slogLogger struct{}

func (slogLogger) Debug(...any) {}
func (slogLogger) Info(...any)  {}
func (slogLogger) Warn(...any)  {}
func (slogLogger) Error(...any) {}
func (slogLogger) Fatal(...any) {}

// TestJobCrashCount: a job's crash counter (vigil:job:{q}:<id>:crashes,
// written by the worker runtime when a worker dies running it) shows in
// the job's detail and in the list; a job without one shows 0.
func TestJobCrashCount(t *testing.T) {
	h := newHarness(t, setup{})
	crashed := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","payload":1}`), http.StatusCreated)
	calm := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","payload":2}`), http.StatusCreated)
	if err := h.redis.Client.Set(ctx(t), h.store.Keys().JobCrashes(h.q1, crashed.ID), 2, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if j := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+crashed.ID), http.StatusOK); j.Crashes != 2 {
		t.Errorf("crashed job's detail: crashes = %d, want 2", j.Crashes)
	}
	if j := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+calm.ID), http.StatusOK); j.Crashes != 0 {
		t.Errorf("calm job's detail: crashes = %d, want 0", j.Crashes)
	}
	b := decode[jobsBody](t, h.get("/api/v1/queues/"+h.q1+"/jobs?state=pending"), http.StatusOK)
	got := map[string]int{}
	for _, j := range b.Jobs {
		got[j.ID] = j.Crashes
	}
	if len(got) != 2 || got[crashed.ID] != 2 || got[calm.ID] != 0 {
		t.Errorf("list: crashes by job = %v, want %s:2 %s:0", got, crashed.ID, calm.ID)
	}
}

// A job's detail carries what its handler reported (last progress, last
// stage, as the worker runtime writes them) and the scratch directory a
// failed run kept; a job with none has none.
func TestJobDetailRunInfo(t *testing.T) {
	h := newHarness(t, setup{})
	ran := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","payload":1}`), http.StatusCreated)
	fresh := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"t","payload":2}`), http.StatusCreated)
	k := h.store.Keys()
	for key, v := range map[string]string{
		k.JobProgress(h.q1, ran.ID): "42.5",
		k.JobStage(h.q1, ran.ID):    "source:ready",
		k.JobScratch(h.q1, ran.ID):  "1234 /tmp/vigil-scratch/" + h.q1 + "/x-1",
	} {
		if err := h.redis.Client.Set(ctx(t), key, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	j := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+ran.ID), http.StatusOK)
	if j.Progress == nil || *j.Progress != 42.5 || j.Stage != "source:ready" || j.ScratchBytes != 1234 || j.ScratchDir != "/tmp/vigil-scratch/"+h.q1+"/x-1" {
		t.Errorf("detail: progress %v stage %q scratch %q %d", j.Progress, j.Stage, j.ScratchDir, j.ScratchBytes)
	}
	if j := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+fresh.ID), http.StatusOK); j.Progress != nil || j.Stage != "" || j.ScratchDir != "" {
		t.Errorf("a job that never ran: %+v", j)
	}
}
