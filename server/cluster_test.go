package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

func TestHostsAndDrain(t *testing.T) {
	h := newHarness(t, setup{workers: 1})
	h.waitStatus(h.id(0), health.StatusHealthy, false)
	// A host that was seen but whose record expired: lost.
	if err := h.redis.Client.ZAdd(ctx(t), h.store.Keys().Hosts(), redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: "gone"}).Err(); err != nil {
		t.Fatal(err)
	}
	list := decode[server.HostList](t, h.get("/api/v1/hosts"), http.StatusOK)
	byID := map[string]server.Host{}
	for _, x := range list.Hosts {
		byID[x.ID] = x
	}
	if me := byID["test-host"]; me.Status != "alive" || me.Slots != 1 || me.PID == 0 {
		t.Errorf("test-host = %+v", me)
	}
	if byID["gone"].Status != "lost" {
		t.Errorf("gone = %+v, want lost", byID["gone"])
	}
	rep := decode[server.HealthReport](t, h.get("/api/v1/health"), http.StatusOK)
	if rep.Status != server.StatusDegraded || !strings.Contains(strings.Join(rep.Reasons, ";"), "host gone lost") {
		t.Errorf("health = %+v, want degraded naming the lost host", rep)
	}

	wantProblem(t, h.post("/api/v1/hosts/nobody/drain", ""), http.StatusNotFound)
	wantProblem(t, h.post("/api/v1/hosts/Bad%7Bid%7D/drain", ""), http.StatusUnprocessableEntity)
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/api/v1/hosts/test-host/drain"}), http.StatusUnauthorized)

	r := decode[server.DrainResult](t, h.post("/api/v1/hosts/test-host/drain", ""), http.StatusOK)
	if r.Action != "drain" || r.Host != "test-host" {
		t.Errorf("drain = %+v", r)
	}
	// Draining the only host moves its slot nowhere: the worker is stopped
	// (released) at the next tick.
	c := h.waitStatus(h.id(0), health.StatusStopped, false)
	if c.Reason != "drain" {
		t.Errorf("after drain: %+v", c)
	}
	decode[server.DrainResult](t, h.post("/api/v1/hosts/test-host/undrain", ""), http.StatusOK)
	h.waitStatus(h.id(0), health.StatusHealthy, false)
}

func TestPools(t *testing.T) {
	h := newHarness(t, setup{workers: 1})
	h.waitStatus(h.id(0), health.StatusHealthy, false)
	pools := decode[server.PoolList](t, h.get("/api/v1/pools"), http.StatusOK)
	if len(pools.Pools) != 2 || pools.Pools[1].Queue != h.q1 && pools.Pools[0].Queue != h.q1 {
		t.Fatalf("pools = %+v", pools)
	}
	put := func(q, body string) *httpRec {
		return h.do(req{method: http.MethodPut, path: "/api/v1/pools/" + q, body: body, token: testToken})
	}
	p := decode[server.Pool](t, put(h.q1, `{"size": 2}`), http.StatusOK)
	if p.Size != 2 {
		t.Fatalf("after PUT size 2: %+v", p)
	}
	h.waitStatus(h.id(1), health.StatusHealthy, false)
	for _, bad := range []string{`{"size": -1}`, `{"size": 5000}`, `{"size": "two"}`, `{}`} {
		rec := put(h.q1, bad)
		if rec.Code != http.StatusUnprocessableEntity && rec.Code != http.StatusBadRequest {
			t.Errorf("PUT %s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	wantProblem(t, put("nope", `{"size": 1}`), http.StatusNotFound)
	wantProblem(t, h.do(req{method: http.MethodPut, path: "/api/v1/pools/" + h.q1, body: `{"size": 1}`}), http.StatusUnauthorized)

	// Rolling restart: every worker gets a new process, one at a time.
	before := map[int]int{}
	for i := range 2 {
		before[i] = h.waitStatus(h.id(i), health.StatusHealthy, false).PID
	}
	ro := decode[server.RolloutResult](t, h.post("/api/v1/pools/"+h.q1+"/restart", ""), http.StatusOK)
	if ro.Workers != 2 {
		t.Fatalf("rollout = %+v", ro)
	}
	for i := range 2 {
		for {
			c := h.waitStatus(h.id(i), health.StatusHealthy, false)
			if c.PID != before[i] {
				if c.Restarts.LifetimeRestarts != 0 {
					t.Errorf("%s: rolling restart counted: %+v", h.id(i), c)
				}
				break
			}
			h.waitNextEvent()
		}
	}
	wantProblem(t, h.post("/api/v1/pools/nope/restart", ""), http.StatusNotFound)
}

func TestPoolRestartWithoutSupervisor(t *testing.T) {
	h := newHarness(t, setup{})
	wantProblem(t, h.post("/api/v1/pools/"+h.q1+"/restart", ""), http.StatusServiceUnavailable)
}
