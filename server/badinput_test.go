package server_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// TestBadInput: malformed ids, wrong content types, invalid JSON, oversize
// bodies and negative numbers get 4xx problem details, never a 5xx, and
// change nothing in Redis.
func TestBadInput(t *testing.T) {
	h := newHarness(t, setup{workers: 1})
	h.waitStatus(h.id(0), health.StatusHealthy, false)
	long := strings.Repeat("a", 10<<10)
	jobs := "/api/v1/queues/" + h.q1 + "/jobs"
	tests := []struct {
		name   string
		r      req
		status int
	}{
		{"dot-dot id", req{method: "POST", path: "/api/v1/workers/worker:../x/restart"}, 404},
		{"escaped dot-dot id", req{method: "POST", path: "/api/v1/workers/worker:..%2Fx/restart"}, 422},
		{"dot-dot segment", req{method: "POST", path: "/api/v1/workers/../x/restart"}, 400},
		{"dot-dot in queue", req{method: "POST", path: "/api/v1/workers/worker:..:0/stop"}, 422},
		{"10 KB id", req{method: "POST", path: "/api/v1/workers/worker:" + long + ":0/reset"}, 422},
		{"10 KB slot", req{method: "GET", path: "/api/v1/workers/worker:" + h.q1 + ":" + strings.Repeat("9", 10<<10)}, 422},
		{"negative slot", req{method: "POST", path: "/api/v1/workers/worker:" + h.q1 + ":-1/stop"}, 422},
		{"leading zero slot", req{method: "POST", path: "/api/v1/workers/worker:" + h.q1 + ":00/stop"}, 422},
		{"braces in id", req{method: "POST", path: "/api/v1/workers/worker:%7Bx%7D:0/stop"}, 422},
		{"10 KB queue", req{method: "POST", path: "/api/v1/queues/" + long + "/pause"}, 422},
		{"queue with a colon", req{method: "POST", path: "/api/v1/queues/a:b/pause"}, 422},
		{"10 KB job id", req{method: "POST", path: "/api/v1/jobs/" + h.q1 + "/" + long + "/retry"}, 422},
		{"wrong content type", req{method: "POST", path: jobs, body: `{"type":"t"}`, ctype: "text/plain"}, 415},
		{"form content type", req{method: "POST", path: jobs, body: `type=t`, ctype: "application/x-www-form-urlencoded"}, 415},
		{"invalid JSON", req{method: "POST", path: jobs, body: `{"type":"t"`}, 400},
		{"oversize body", req{method: "POST", path: jobs, body: `{"type":"t","payload":"` + strings.Repeat("x", 1<<20) + `"}`}, 413},
		{"negative delay", req{method: "POST", path: jobs, body: `{"type":"t","delay_seconds":-3}`}, 422},
		{"negative page", req{method: "GET", path: jobs + "?page=-1"}, 422},
		{"negative page size", req{method: "GET", path: jobs + "?page_size=-1"}, 422},
		{"huge page size", req{method: "GET", path: jobs + "?page_size=100000000000000000000"}, 422},
		{"bad bool", req{method: "POST", path: "/api/v1/workers/" + h.id(0).String() + "/reset?restart=2"}, 422},
		{"session invalid JSON", req{method: "POST", path: "/api/v1/session", body: `{`}, 400},
		{"session 10 KB token", req{method: "POST", path: "/api/v1/session", body: `{"token":"` + strings.Repeat("t", 10<<10) + `"}`}, 422},
		{"unknown route", req{method: "GET", path: "/api/v1/nothing"}, 404},
		{"wrong method", req{method: "PUT", path: "/api/v1/pause"}, 405},
		{"double slash", req{method: "POST", path: "/api/v1//pause"}, 400},
	}
	before := h.dump()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.r.token == "" && tt.r.path != "/api/v1/session" {
				tt.r.token = testToken
			}
			rec := h.do(tt.r)
			wantProblem(t, rec, tt.status)
		})
	}
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("rejected requests changed Redis: %v", d)
	}
	if c, _ := h.store.Get(ctx(t), h.id(0)); c.Status != health.StatusHealthy {
		t.Errorf("the worker is %s after the bad requests", c.Status)
	}
	// A body of exactly max_body is read (and judged on its content).
	exact := `{"type":"t","payload":"` + strings.Repeat("x", 1<<20-len(`{"type":"t","payload":""}`)) + `"}`
	if len(exact) != 1<<20 {
		t.Fatalf("exact body is %d bytes", len(exact))
	}
	decode[server.Job](t, h.do(req{method: http.MethodPost, path: jobs, body: exact, token: testToken}), http.StatusCreated)
}

// TestBrokenRequestBody: a body that breaks off while it is read (a bad
// chunk, a client gone mid-body) is the client's fault: 400, not the 500
// Huma gives for any read error, and nothing written.
func TestBrokenRequestBody(t *testing.T) {
	h := newHarness(t, setup{})
	before := h.dump()
	for _, path := range []string{"/api/v1/queues/" + h.q1 + "/jobs", "/api/v1/session", "/api/v1/pools/" + h.q1} {
		method := http.MethodPost
		if strings.HasPrefix(path, "/api/v1/pools/") {
			method = http.MethodPut
		}
		body := io.MultiReader(strings.NewReader(`{"type":`), iotest.ErrReader(errors.New("invalid byte in chunk length")))
		hr := httptest.NewRequest(method, "http://vigil.test"+path, body)
		hr.RemoteAddr = "127.0.0.1:40000"
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.h.ServeHTTP(rec, hr)
		if p := wantProblem(t, rec, http.StatusBadRequest); !strings.Contains(p.Detail, "invalid byte in chunk length") {
			t.Errorf("%s %s: %q", method, path, p.Detail)
		}
	}
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("broken bodies changed Redis: %v", d)
	}
}
