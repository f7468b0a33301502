package server_test

import (
	"net/http"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// GET /api/v1/workers/{c} carries the worker's first registration, the
// version its heartbeat reports and the counters its process reports
// (issue 20, worker details); the list leaves the counters out.
func TestWorkerDetails(t *testing.T) {
	h := newHarness(t, setup{})
	id := h.id(0)
	h.seed(id, health.StatusHealthy, nil) // its updated_at is its first registration
	c := h.redis.Client
	c.HSet(ctx(t), h.store.Keys().Component(id), health.FieldVersion, "v2.0.1")
	c.HSet(ctx(t), h.store.Keys().WorkerStats(id), "jobs_done", 12, "heartbeats", 40, "failures:TIMEOUT", 2)

	w := decode[server.Worker](t, h.get("/api/v1/workers/"+id.String()), http.StatusOK)
	if w.CreatedAt != 1_790_000_001_000 || w.Version != "v2.0.1" {
		t.Errorf("created_at %d version %q", w.CreatedAt, w.Version)
	}
	if w.Stats["jobs_done"] != 12 || w.Stats["heartbeats"] != 40 || w.Stats["failures:TIMEOUT"] != 2 {
		t.Errorf("stats %v", w.Stats)
	}
	list := decode[workersBody](t, h.get("/api/v1/workers"), http.StatusOK)
	if len(list.Workers) != 1 || list.Workers[0].Stats != nil || list.Workers[0].Version != "v2.0.1" {
		t.Errorf("list %+v", list.Workers)
	}
}
