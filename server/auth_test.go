package server_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/server"
)

// specOp is one operation of the served spec.
type specOp struct {
	method, path string
	security     []map[string][]string
}

// operations enumerates the spec's operations, path parameters filled
// with well-formed values.
func operations(t *testing.T, h *harness) []specOp {
	t.Helper()
	type operation struct {
		Security []map[string][]string `json:"security"`
	}
	spec := decode[struct {
		Paths map[string]map[string]operation `json:"paths"`
	}](t, h.do(req{method: http.MethodGet, path: "/openapi.json"}), http.StatusOK)
	fill := strings.NewReplacer("{component}", h.id(0).String(), "{queue}", h.q1, "{id}", "some-task")
	var ops []specOp
	for p, methods := range spec.Paths {
		for m, op := range methods {
			ops = append(ops, specOp{method: strings.ToUpper(m), path: fill.Replace(p), security: op.Security})
		}
	}
	if len(ops) < 20 {
		t.Fatalf("only %d operations in the spec", len(ops))
	}
	return ops
}

// clients numbers the clients of newClient.
var clients atomic.Int64

// newClient returns a client address (loopback) no request used before:
// wrong tokens from one client are throttled after FailedLoginBurst.
func newClient() string {
	n := clients.Add(1)
	return fmt.Sprintf("127.%d.%d.%d:4000", n>>16&255, n>>8&255, n&255)
}

func isMutation(op specOp) bool { return op.method != http.MethodGet }

func isSession(op specOp) bool { return op.path == "/api/v1/session" }

// TestSecurityDeclared checks the spec: mutations require the bearer, reads
// take it optionally, open routes declare no auth.
func TestSecurityDeclared(t *testing.T) {
	h := newHarness(t, setup{})
	open := []string{"/livez", "/readyz", "/api/v1/session"}
	for _, op := range operations(t, h) {
		var want string
		switch {
		case slices.Contains(open, op.path):
			want = "[map[]]"
		case isMutation(op):
			want = "[map[bearer:[]]]"
		default:
			want = "[map[] map[bearer:[]]]"
		}
		if got := fmtSecurity(op.security); got != want {
			t.Errorf("%s %s: security %s, want %s", op.method, op.path, got, want)
		}
	}
}

func fmtSecurity(s []map[string][]string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, m := range s {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("map[")
		if _, ok := m["bearer"]; ok {
			b.WriteString("bearer:[]")
		}
		b.WriteString("]")
	}
	b.WriteString("]")
	return b.String()
}

// TestEveryMutationNeedsTheToken: 401 without a token or with a wrong one,
// 403 in read-only mode (with the right token), and nothing written.
func TestEveryMutationNeedsTheToken(t *testing.T) {
	h := newHarness(t, setup{})
	ro := newHarness(t, setup{cfg: func(c *server.Config) { c.ReadOnly = true }})
	before, roBefore := h.dump(), ro.dump()
	n := 0
	for _, op := range operations(t, h) {
		if !isMutation(op) || isSession(op) {
			continue
		}
		n++
		body := ""
		if strings.HasSuffix(op.path, "/jobs") {
			body = `{"type":"t"}`
		}
		for _, tok := range []string{"", "wrong"} {
			rec := h.do(req{method: op.method, path: op.path, body: body, token: tok, remote: newClient()})
			if wantProblem(t, rec, http.StatusUnauthorized); rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", op.method, op.path)
			}
		}
		// An empty header, the wrong scheme, the token mangled or without
		// its scheme, a forged session cookie: all refused alike.
		for _, auth := range []string{"", "Bearer", "Bearer ", "Basic " + base64.StdEncoding.EncodeToString([]byte(testToken)),
			"Token " + testToken, "Bearer" + testToken, testToken, "Bearer " + testToken + "x", "Bearer " + strings.ToUpper(testToken),
			"Bearer " + testToken[:len(testToken)-1]} {
			rec := h.do(req{method: op.method, path: op.path, body: body, header: map[string]string{"Authorization": auth}, remote: newClient()})
			wantProblem(t, rec, http.StatusUnauthorized)
		}
		forged := &http.Cookie{Name: server.SessionCookie, Value: "9999999999." + strings.Repeat("0", 64)}
		wantProblem(t, h.do(req{method: op.method, path: op.path, body: body, cookie: forged}), http.StatusUnauthorized)
		rec := ro.do(req{method: op.method, path: op.path, body: body, token: testToken})
		if p := wantProblem(t, rec, http.StatusForbidden); !strings.Contains(p.Detail, "read-only") {
			t.Errorf("%s %s in read-only mode: %q", op.method, op.path, p.Detail)
		}
	}
	if n < 11 {
		t.Errorf("only %d mutating operations checked", n)
	}
	if d := diff(before, h.dump()); len(d) > 0 {
		t.Errorf("unauthorized mutations wrote: %v", d)
	}
	if d := diff(roBefore, ro.dump()); len(d) > 0 {
		t.Errorf("read-only mutations wrote: %v", d)
	}
}

func TestReadsAndAuthReads(t *testing.T) {
	open := newHarness(t, setup{})
	closed := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true }})
	for _, op := range operations(t, open) {
		if isMutation(op) || op.path == "/livez" || op.path == "/readyz" {
			continue
		}
		if rec := open.do(req{method: op.method, path: op.path, remote: "192.0.2.7:5000"}); rec.Code == 401 || rec.Code == 403 {
			t.Errorf("%s %s without auth_reads: %d", op.method, op.path, rec.Code)
		}
		wantProblem(t, closed.do(req{method: op.method, path: op.path}), http.StatusUnauthorized)
		wantProblem(t, closed.do(req{method: op.method, path: op.path, token: "nope", remote: newClient()}), http.StatusUnauthorized)
		if rec := closed.do(req{method: op.method, path: op.path, token: testToken}); rec.Code == 401 || rec.Code == 403 {
			t.Errorf("%s %s with the token: %d", op.method, op.path, rec.Code)
		}
	}
}

// TestNoTokenLoopbackOnly: without a token, mutations only from loopback
// clients, decided per request, and not cross-site.
func TestNoTokenLoopbackOnly(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.Token = "" }})
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	for _, remote := range []string{"192.0.2.7:5000", "[2001:db8::1]:5000", "10.0.0.1:1"} {
		p := wantProblem(t, h.do(req{method: http.MethodPost, path: pause, remote: remote}), http.StatusForbidden)
		if !strings.Contains(p.Detail, "loopback") {
			t.Errorf("from %s: %q", remote, p.Detail)
		}
	}
	wantProblem(t, h.do(req{method: http.MethodPost, path: pause, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}), http.StatusForbidden)
	for _, remote := range []string{"127.0.0.1:5000", "[::1]:5000", "127.8.9.1:1"} {
		decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, remote: remote}), http.StatusOK)
	}
	// Reads from anywhere.
	decode[workersBody](t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", remote: "192.0.2.7:5000"}), http.StatusOK)
	// The session route says no session is needed.
	s := decode[server.Session](t, h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"x"}`}), http.StatusOK)
	if s.AuthRequired || s.Authenticated {
		t.Errorf("session without a token = %+v", s)
	}
}

func TestSessionCookie(t *testing.T) {
	fc := clock.NewFake(time.UnixMilli(1_790_000_000_000))
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true; c.Clock = fc; c.SessionTTL = time.Hour }})
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"wrong"}`}), http.StatusUnauthorized)
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":""}`}), http.StatusUnauthorized)
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{}`}), http.StatusUnprocessableEntity)

	rec := h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"` + testToken + `"}`})
	s := decode[server.Session](t, rec, http.StatusOK)
	if !s.Authenticated || !s.AuthRequired || s.ExpiresAt != fc.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("session = %+v", s)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies = %+v", cookies)
	}
	c := cookies[0]
	if c.Name != server.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || strings.Contains(c.Value, testToken) {
		t.Fatalf("cookie = %+v", c)
	}
	// Reads and same-origin mutations with the cookie.
	decode[workersBody](t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: c}), http.StatusOK)
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, cookie: c, header: map[string]string{"Sec-Fetch-Site": "same-origin"}}), http.StatusOK)
	wantProblem(t, h.do(req{method: http.MethodPost, path: pause, cookie: c}), http.StatusForbidden) // neither Origin nor Sec-Fetch-Site
	for _, site := range []string{"cross-site", "same-site", "none"} {
		wantProblem(t, h.do(req{method: http.MethodPost, path: pause, cookie: c, header: map[string]string{"Sec-Fetch-Site": site}}), http.StatusForbidden)
	}
	// A wrong header is not rescued by the cookie.
	wantProblem(t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: c, token: "wrong"}), http.StatusUnauthorized)
	// Forged and expired cookies.
	forged := *c
	forged.Value = regexp.MustCompile(`\.[0-9a-f]{4}`).ReplaceAllString(c.Value, ".0000")
	wantProblem(t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: &forged}), http.StatusUnauthorized)
	fc.Advance(time.Hour)
	wantProblem(t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: c}), http.StatusUnauthorized)

	// DELETE clears it.
	rec = h.do(req{method: http.MethodDelete, path: "/api/v1/session"})
	if cs := rec.Result().Cookies(); rec.Code != 200 || len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Fatalf("delete session: %d %+v", rec.Code, cs)
	}
}

// TestSessionIsNotReadOnly: the session route works in read-only mode.
func TestSessionInReadOnlyMode(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.ReadOnly = true }})
	decode[server.Session](t, h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"` + testToken + `"}`}), http.StatusOK)
}
