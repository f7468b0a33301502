package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/server"
)

// DELETE /api/v1/workers/{c}: a stopped worker beyond its pool's size is
// removed (its record, history, heartbeat, counters and pause), with a
// worker_removed event keeping its history; 409 within the pool, 404 for
// an unknown one, 422 for a malformed id (issue 20).
func TestRemoveWorkerBeyondPool(t *testing.T) {
	h := newHarness(t, setup{workers: 1})
	h.waitStatus(h.id(0), health.StatusHealthy, false)
	left := h.id(4) // beyond the pool of 1, held by no host
	h.seed(left, health.StatusStopped, func(c *health.Component) {
		c.Reason, c.PID = "pool shrink", 0
		c.Restarts = policy.State{LifetimeRestarts: 7}
	})
	path := "/api/v1/workers/"
	del := func(id string) *httptest.ResponseRecorder {
		return h.do(req{method: http.MethodDelete, path: path + id, token: testToken})
	}

	wantProblem(t, del(h.id(0).String()), http.StatusConflict)
	wantProblem(t, del(h.id(9).String()), http.StatusNotFound)
	wantProblem(t, del("worker:x"), http.StatusUnprocessableEntity)
	wantProblem(t, del("worker:"+h.q1+":..%2F1"), http.StatusUnprocessableEntity)

	a := decode[server.WorkerAction](t, del(left.String()), http.StatusOK)
	if a.Action != "remove" || a.Worker.Status != "stopped" || a.Worker.LifetimeRestarts != 7 {
		t.Errorf("remove = %+v", a)
	}
	if _, err := h.store.Get(ctx(t), left); err == nil {
		t.Errorf("%s still has a record", left)
	}
	wantProblem(t, h.get(path+left.String()), http.StatusNotFound)
	removed := 0
	for _, m := range h.redis.Client.XRange(ctx(t), h.store.Keys().Events(), "-", "+").Val() {
		if m.Values["type"] == health.EventWorkerRemoved && m.Values["topic"] == left.Topic() {
			removed++
		}
	}
	if removed != 1 {
		t.Errorf("%d worker_removed events, want 1", removed)
	}
	wantProblem(t, del(left.String()), http.StatusNotFound) // gone: a second DELETE finds nothing
}
