package server_test

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/server"
)

// login exchanges the token for the session cookie.
func login(t *testing.T, h *harness, r req) *http.Cookie {
	t.Helper()
	r.method, r.path, r.body = http.MethodPost, "/api/v1/session", `{"token":"`+testToken+`"}`
	rec := h.do(r)
	decode[server.Session](t, rec, http.StatusOK)
	cs := rec.Result().Cookies()
	if len(cs) != 1 {
		t.Fatalf("cookies %+v", cs)
	}
	return cs[0]
}

// TestCookieMutationNeedsItsOrigin: a mutation authenticated by the cookie
// needs Sec-Fetch-Site: same-origin or an Origin naming this server; a
// foreign Origin, or neither header, is refused (issue 18, row 8).
func TestCookieMutationNeedsItsOrigin(t *testing.T) {
	h := newHarness(t, setup{})
	c := login(t, h, req{})
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	for name, hdr := range map[string]map[string]string{
		"foreign Origin":                    {"Origin": "https://evil.example"},
		"foreign Origin, same-origin fetch": {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"},
		"no Origin, no Sec-Fetch-Site":      {},
		"cross-site fetch":                  {"Sec-Fetch-Site": "cross-site"},
		"null Origin":                       {"Origin": "null"},
	} {
		if rec := h.do(req{method: http.MethodPost, path: pause, cookie: c, header: hdr}); rec.Code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, rec.Code)
		}
	}
	for name, hdr := range map[string]map[string]string{
		"same-origin fetch": {"Sec-Fetch-Site": "same-origin"},
		"matching Origin":   {"Origin": "http://127.0.0.1:8080"},
		"both":              {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"},
	} {
		if rec := h.do(req{method: http.MethodPost, path: pause, cookie: c, header: hdr}); rec.Code != http.StatusOK {
			t.Errorf("%s: %d, want 200", name, rec.Code)
		}
	}
	// The bearer header needs neither (not a browser's ambient credential).
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, token: testToken}), http.StatusOK)
}

// TestSessionIsRevocable: DELETE /api/v1/session ends the session on the
// server: the cookie stops working even if the browser (or a thief) keeps
// it (issue 18, row 9).
func TestSessionIsRevocable(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true }})
	c := login(t, h, req{})
	other := login(t, h, req{})
	same := map[string]string{"Sec-Fetch-Site": "same-origin"}
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, cookie: c, header: same}), http.StatusOK)

	rec := h.do(req{method: http.MethodDelete, path: "/api/v1/session", cookie: c, header: same})
	if cs := rec.Result().Cookies(); rec.Code != http.StatusOK || len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Fatalf("delete session: %d %+v", rec.Code, cs)
	}
	if rec := h.do(req{method: http.MethodPost, path: pause, cookie: c, header: same}); rec.Code != http.StatusUnauthorized {
		t.Errorf("mutation with the deleted session's cookie: %d, want 401", rec.Code)
	}
	if rec := h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: c}); rec.Code != http.StatusUnauthorized {
		t.Errorf("read with the deleted session's cookie: %d, want 401", rec.Code)
	}
	// Another session is not touched.
	decode[workersBody](t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", cookie: other}), http.StatusOK)
}

// TestSessionCookieSecure: the cookie is Secure over TLS, behind a trusted
// proxy that says https, or when configured so; an untrusted peer's
// X-Forwarded-Proto changes nothing.
func TestSessionCookieSecure(t *testing.T) {
	proxy := netip.MustParsePrefix("10.1.0.0/16")
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.TrustedProxies = []netip.Prefix{proxy} }})
	https := map[string]string{"X-Forwarded-Proto": "https"}
	for _, tt := range []struct {
		name   string
		r      req
		tls    bool
		secure bool
	}{
		{"plain http", req{}, false, false},
		{"tls", req{}, true, true},
		{"trusted proxy, https", req{remote: "10.1.2.3:4000", header: https}, false, true},
		{"trusted proxy, http", req{remote: "10.1.2.3:4000", header: map[string]string{"X-Forwarded-Proto": "http"}}, false, false},
		{"untrusted peer says https", req{remote: "192.0.2.1:4000", header: https}, false, false},
		{"loopback peer says https", req{header: https}, false, false},
	} {
		c := loginTLS(t, h, tt.r, tt.tls)
		if c.Secure != tt.secure {
			t.Errorf("%s: Secure = %v, want %v", tt.name, c.Secure, tt.secure)
		}
	}
	hs := newHarness(t, setup{cfg: func(c *server.Config) { c.CookieSecure = true }})
	if c := login(t, hs, req{}); !c.Secure {
		t.Error("cookie_secure: true: the cookie is not Secure")
	}
}

// loginTLS is login, the request marked as arrived over TLS when tls.
func loginTLS(t *testing.T, h *harness, r req, overTLS bool) *http.Cookie {
	t.Helper()
	if !overTLS {
		return login(t, h, r)
	}
	hr := httptest.NewRequest(http.MethodPost, "https://127.0.0.1:8443/api/v1/session", strings.NewReader(`{"token":"`+testToken+`"}`))
	hr.Header.Set("Content-Type", "application/json")
	hr.RemoteAddr = "127.0.0.1:40000"
	hr.TLS = &tls.ConnectionState{HandshakeComplete: true}
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, hr)
	if rec.Code != http.StatusOK || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("login over TLS: %d %s", rec.Code, rec.Body)
	}
	return rec.Result().Cookies()[0]
}

// TestFailedLoginsThrottledAndLogged: wrong tokens from one client are
// throttled (429 with Retry-After, the right token too, until the
// client's budget refills) and logged without flooding the log; other
// clients are not affected (issue 18, row 10: 1,000 wrong tokens in 0.3 s,
// no log line).
func TestFailedLoginsThrottledAndLogged(t *testing.T) {
	fc := clock.NewFake(time.UnixMilli(1_790_000_000_000))
	logs := &testlog.Buffer{}
	h := newHarness(t, setup{cfg: func(c *server.Config) {
		c.Clock = fc
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}})
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	attacker := "192.0.2.66:5000"
	counts := map[int]int{}
	for i := range 1000 {
		r := req{method: http.MethodPost, path: pause, token: "guess-" + strconv.Itoa(i), remote: attacker}
		if i%2 == 1 {
			r = req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"guess-` + strconv.Itoa(i) + `"}`, remote: attacker}
		}
		rec := h.do(r)
		counts[rec.Code]++
		if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if counts[http.StatusUnauthorized] > server.FailedLoginBurst || counts[http.StatusTooManyRequests] < 1000-server.FailedLoginBurst {
		t.Errorf("1,000 wrong tokens from one client: %v; want at most %d answered 401, the rest 429", counts, server.FailedLoginBurst)
	}
	// The right token from the throttled client waits too; another client
	// is not affected.
	if rec := h.do(req{method: http.MethodPost, path: pause, token: testToken, remote: attacker}); rec.Code != http.StatusTooManyRequests {
		t.Errorf("right token from the throttled client: %d, want 429", rec.Code)
	}
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, token: testToken, remote: "192.0.2.77:5000"}), http.StatusOK)
	fc.Advance(time.Hour)
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, token: testToken, remote: attacker}), http.StatusOK)

	out := logs.String()
	lines := strings.Count(out, "failed admin login")
	if lines < 1 || lines > 5 || !strings.Contains(out, "192.0.2.66") {
		t.Errorf("%d log lines about failed logins (want 1 to 5, naming the client):\n%s", lines, out)
	}
	if strings.Contains(out, "guess-") {
		t.Error("a tried token is in the log")
	}
}
