package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/server"
)

// TestNoTokenFromThisHostOnly: without a token, a mutation and the session
// route are accepted only when the TCP peer is loopback, the Host header
// names a loopback address, localhost or a listen host, and no forwarding
// header is there (issue 15 §3): a browser under DNS rebinding sends a
// foreign Host, a reverse proxy on the same host a forwarding header.
func TestNoTokenFromThisHostOnly(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.Token = ""; c.ListenHosts = []string{"vigil.internal"} }})
	pause := "/api/v1/queues/" + h.q1 + "/pause"
	refused := []struct {
		name   string
		host   string
		header map[string]string
	}{
		{"rebinding Host", "rebind.example", nil},
		{"rebinding Host with port", "rebind.example:8080", nil},
		{"public address as Host", "203.0.113.9:8080", nil},
		{"no Host", noHost, nil},
		{"X-Forwarded-For", "127.0.0.1:8080", map[string]string{"X-Forwarded-For": "203.0.113.9"}},
		{"X-Forwarded-For saying loopback", "127.0.0.1:8080", map[string]string{"X-Forwarded-For": "127.0.0.1"}},
		{"Forwarded", "127.0.0.1:8080", map[string]string{"Forwarded": "for=203.0.113.9"}},
		{"X-Real-IP", "localhost:8080", map[string]string{"X-Real-IP": "203.0.113.9"}},
		{"foreign Origin", "127.0.0.1:8080", map[string]string{"Origin": "https://evil.example"}},
	}
	for _, tt := range refused {
		for _, path := range []string{pause, "/api/v1/session"} {
			r := req{method: http.MethodPost, path: path, host: tt.host, header: tt.header}
			if path == "/api/v1/session" {
				r.body = `{"token":"x"}`
			}
			rec := h.do(r)
			if rec.Code != http.StatusForbidden {
				t.Errorf("%s, %s: %d, want 403", tt.name, path, rec.Code)
				continue
			}
			p := wantProblem(t, rec, http.StatusForbidden)
			want := "Set a token"
			if tt.header["Origin"] != "" {
				want = "origin" // a token would not help a page of another site
			}
			if !strings.Contains(p.Detail, want) {
				t.Errorf("%s, %s: detail %q does not say %q", tt.name, path, p.Detail, want)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "127.0.0.2", "vigil.internal:8080"} {
		decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, host: host}), http.StatusOK)
		decode[server.Session](t, h.do(req{method: http.MethodPost, path: "/api/v1/session", host: host, body: `{"token":"x"}`}), http.StatusOK)
	}
	// A same-origin browser request passes.
	decode[server.PauseResult](t, h.do(req{method: http.MethodPost, path: pause, host: "localhost:8080",
		header: map[string]string{"Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"}}), http.StatusOK)
	// Reads are still open to anyone (auth_reads is off).
	decode[workersBody](t, h.do(req{method: http.MethodGet, path: "/api/v1/workers", host: "rebind.example", remote: "192.0.2.7:5000"}), http.StatusOK)
}
