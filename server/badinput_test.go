package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/server"
)

// TestBadInput: malformed ids, wrong content types, invalid JSON, oversize
// bodies and negative numbers get 4xx problem details, never a 5xx, and
// change nothing in Redis.
func TestBadInput(t *testing.T) {
	h := newHarness(t, setup{workers: 1})
	h.waitStatus(h.id(0), health.StatusHealthy, false)
	// And the health summary has caught up with it: it is written after
	// the worker's record (CI saw it go from "degraded: queue … has no
	// healthy worker" to healthy between the two dumps below).
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := h.redis.Client.Get(ctx(t), h.store.Keys().Health()).Result()
		if err == nil && strings.HasPrefix(v, "healthy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health summary is %q (%v) 15 s after the worker was healthy", v, err)
		}
		<-time.After(20 * time.Millisecond) // polling Redis
	}
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

// TestOversizeBodyClosesTheConnection: once a body passes max_body the
// server answers 413 and closes the connection. Left open, the rest of the
// body, unread, is parsed as the next request on the connection (net/http
// discards a tail of up to 256 KB, not a longer one): a request smuggled
// inside a body, here a pause, would run.
func TestOversizeBodyClosesTheConnection(t *testing.T) {
	const maxBody = 64 << 10
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.MaxBody = maxBody }})
	srv := httptest.NewServer(h.h)
	defer srv.Close()
	before := h.dump()
	for _, tail := range []int{0, 300 << 10} {
		// The body: max_body + 1 bytes (all the server reads), then a
		// request, made longer than what net/http discards by a header.
		smuggled := "POST /api/v1/queues/" + h.q1 + "/pause HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
			"\r\nX-Pad: " + strings.Repeat("p", tail) + "\r\nContent-Length: 0\r\n\r\n"
		body := strings.Repeat("x", maxBody+1) + smuggled
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		req := "POST /api/v1/queues/" + h.q1 + "/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		wrote := make(chan struct{})
		go func() { // the server may stop reading
			defer close(wrote)
			_, _ = conn.Write([]byte(req))
		}()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("tail %d: %v", tail, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || !res.Close {
			t.Errorf("tail %d: %d, Connection: close %v; want 413 and close", tail, res.StatusCode, res.Close)
		}
		if res2, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("tail %d: a second answer on the connection: %d (the body's tail was taken for a request)", tail, res2.StatusCode)
		}
		conn.Close()
		<-wrote
	}
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("the smuggled request ran: %v", d)
	}
}

// TestDeclaredBodyNeverSent: a request that declares a huge body and sends
// none is answered at once, and its connection closed, not held until the
// body read timeout.
func TestDeclaredBodyNeverSent(t *testing.T) {
	h := newHarness(t, setup{})
	srv := httptest.NewServer(h.h)
	defer srv.Close()
	for _, target := range []string{"/api/v1/workers", "/api/v1/queues/" + h.q1 + "/jobs", "/api/v1/queues/a:b/pause"} {
		method := http.MethodGet
		if target != "/api/v1/workers" {
			method = http.MethodPost
		}
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte(method + " " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
			"\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{"))
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Errorf("%s %s: no answer within 5 s: %v", method, target, err)
			continue
		}
		res.Body.Close()
		if res.StatusCode >= 500 || !res.Close {
			t.Errorf("%s %s: %d, Connection: close %v", method, target, res.StatusCode, res.Close)
		}
	}
}
