package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

type workersBody struct {
	Workers []server.Worker `json:"workers"`
}

func TestListAndGetWorkers(t *testing.T) {
	h := newHarness(t, setup{})
	failed := health.ComponentID{Queue: h.q1, Slot: 1}
	h.seed(h.id(0), health.StatusHealthy, nil)
	crashes := []time.Time{time.UnixMilli(1790000000000), time.UnixMilli(1790000030000)}
	h.seed(failed, health.StatusFailed, func(c *health.Component) {
		c.PID, c.HasExit, c.ExitCode, c.Reason = 0, true, 3, "exit code 3"
		c.Restarts.LifetimeRestarts, c.Restarts.FailureReason = 4, "5 crashes within 5m0s"
		c.Restarts.Crashes, c.Restarts.LastRestart = crashes, time.UnixMilli(1790000030500)
	})

	list := decode[workersBody](t, h.get("/api/v1/workers"), http.StatusOK)
	if len(list.Workers) != 2 || list.Workers[0].Component != h.id(0).String() || list.Workers[1].Component != failed.String() {
		t.Fatalf("workers = %+v", list.Workers)
	}
	w := decode[server.Worker](t, h.get("/api/v1/workers/"+failed.String()), http.StatusOK)
	if w.Status != "failed" || w.ExitCode == nil || *w.ExitCode != 3 || w.LifetimeRestarts != 4 || w.FailureReason == "" || w.QueueType != h.q1 || w.ID != 1 {
		t.Errorf("worker = %+v", w)
	}
	// Its restart history: the crash window the policy judges, and the
	// last counted restart.
	if !slices.Equal(w.RecentCrashes, []int64{1790000000000, 1790000030000}) || w.LastRestart != 1790000030500 {
		t.Errorf("restart history: recent_crashes %v, last_restart %d", w.RecentCrashes, w.LastRestart)
	}
	if list.Workers[0].RecentCrashes != nil || list.Workers[0].LastRestart != 0 {
		t.Errorf("a worker that never crashed: %+v", list.Workers[0])
	}
	// Escaped colons are the same id.
	decode[server.Worker](t, h.get("/api/v1/workers/"+strings.ReplaceAll(failed.String(), ":", "%3A")), http.StatusOK)

	wantProblem(t, h.get("/api/v1/workers/worker:"+h.q1+":7"), http.StatusNotFound)
	wantProblem(t, h.get("/api/v1/workers/worker:nope"), http.StatusUnprocessableEntity)
}

func TestWorkerActionsOnLiveWorkers(t *testing.T) {
	h := newHarness(t, setup{workers: 2})
	id := h.id(0)
	h.waitStatus(id, health.StatusHealthy, false)
	h.waitStatus(h.id(1), health.StatusHealthy, false)
	path := "/api/v1/workers/" + id.String()

	// Reset refuses a running worker: 409, nothing changed.
	p := wantProblem(t, h.post(path+"/reset", ""), http.StatusConflict)
	if !strings.Contains(p.Detail, "cannot go from") {
		t.Errorf("409 detail %q does not say what was refused", p.Detail)
	}

	// Stop: stopped and held once the answer comes.
	a := decode[server.WorkerAction](t, h.post(path+"/stop", ""), http.StatusOK)
	if a.Action != "stop" || a.Worker.Status != "stopped" || !a.Worker.Held {
		t.Fatalf("stop = %+v", a)
	}
	if c, _ := h.store.Get(ctx(t), id); c.Status != health.StatusStopped || !c.Held {
		t.Fatalf("stored after stop: %s held %v", c.Status, c.Held)
	}

	// Reset of a held stopped worker: stays stopped and held.
	a = decode[server.WorkerAction](t, h.post(path+"/reset", ""), http.StatusOK)
	if a.Worker.Status != "stopped" || !a.Worker.Held || a.Worker.RestartCount != 0 || a.Worker.LifetimeRestarts != 0 {
		t.Fatalf("reset = %+v", a)
	}

	// Restart: starts the held one.
	a = decode[server.WorkerAction](t, h.post(path+"/restart", ""), http.StatusOK)
	if a.Action != "restart" || a.Worker.Status != "starting" || a.Worker.Held || a.Worker.PID == 0 {
		t.Fatalf("restart = %+v", a)
	}
	h.waitStatus(id, health.StatusHealthy, false)

	// Restart of a running worker: a new process.
	oldPID := a.Worker.PID
	a = decode[server.WorkerAction](t, h.post(path+"/restart", ""), http.StatusOK)
	if a.Worker.PID == oldPID || a.Worker.Status != "starting" {
		t.Fatalf("restart of a running worker = %+v (old pid %d)", a, oldPID)
	}

	// Logs of a worker of this host.
	logs := decode[struct {
		Component string   `json:"component"`
		Lines     []string `json:"lines"`
	}](t, h.get(path+"/logs"), http.StatusOK)
	if logs.Component != id.String() || logs.Lines == nil {
		t.Errorf("logs = %+v", logs)
	}

	// Unknown and malformed components.
	for _, action := range []string{"restart", "stop", "reset"} {
		wantProblem(t, h.post("/api/v1/workers/worker:"+h.q1+":9/"+action, ""), http.StatusNotFound)
		wantProblem(t, h.post("/api/v1/workers/worker:"+h.q2+":0/"+action, ""), http.StatusNotFound)
		wantProblem(t, h.post("/api/v1/workers/worker:x/"+action, ""), http.StatusUnprocessableEntity)
	}
	wantProblem(t, h.get("/api/v1/workers/worker:"+h.q1+":9/logs"), http.StatusNotFound)

	// Actions are announced on the event stream.
	n := 0
	for _, m := range h.redis.Client.XRange(ctx(t), h.store.Keys().Events(), "-", "+").Val() {
		if m.Values["type"] == health.EventAction && m.Values["topic"] == id.Topic() {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d action events for %s, want 4 (stop, reset, restart, restart)", n, id)
	}
}

func TestResetFailedWorker(t *testing.T) {
	// A command that exits at once: two crashes in the window mark it failed.
	h := newHarness(t, setup{workers: 1, command: []string{"sh", "-c", "exit 3"}})
	id := h.id(0)
	c := h.waitStatus(id, health.StatusFailed, false)
	if c.Restarts.LifetimeRestarts == 0 {
		t.Fatalf("failed worker has no restarts: %+v", c.Restarts)
	}
	path := "/api/v1/workers/" + id.String()
	a := decode[server.WorkerAction](t, h.post(path+"/reset", ""), http.StatusOK)
	if a.Worker.Status != "stopped" || !a.Worker.Held || a.Worker.LifetimeRestarts != 0 || a.Worker.RestartCount != 0 || a.Worker.FailedAt != 0 {
		t.Fatalf("reset = %+v", a.Worker)
	}
	got, _ := h.store.Get(ctx(t), id)
	if got.Status != health.StatusStopped || !got.Held || got.Restarts.LifetimeRestarts != 0 || len(got.Restarts.Crashes) != 0 {
		t.Fatalf("stored after reset: %+v", got)
	}
	// ?restart=true starts it (and this command fails again).
	a = decode[server.WorkerAction](t, h.post(path+"/reset?restart=true", ""), http.StatusOK)
	if a.Worker.Status != "starting" || a.Worker.Held {
		t.Fatalf("reset?restart=true = %+v", a.Worker)
	}
	wantProblem(t, h.post(path+"/reset?restart=maybe", ""), http.StatusUnprocessableEntity)
}

func TestWorkerActionsWithoutSupervisor(t *testing.T) {
	h := newHarness(t, setup{})
	h.seed(h.id(0), health.StatusHealthy, nil)
	for _, action := range []string{"restart", "stop", "reset"} {
		wantProblem(t, h.post("/api/v1/workers/"+h.id(0).String()+"/"+action, ""), http.StatusNotFound)
	}
	if l := decode[server.WorkerLogs](t, h.get("/api/v1/workers/"+h.id(0).String()+"/logs"), http.StatusOK); len(l.Lines) != 0 {
		t.Errorf("logs without a supervisor = %+v", l)
	}
}
