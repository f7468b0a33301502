package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzAPI sends arbitrary methods, paths, bodies and content types to a
// server with a token: no 5xx, no panic, and a rejected request changes
// nothing in Redis.
func FuzzAPI(f *testing.F) {
	seeds := []struct{ method, path, body, ctype string }{
		{"GET", "/api/v1/workers", "", ""},
		{"GET", "/api/v1/workers/worker:tag:0", "", ""},
		{"POST", "/api/v1/workers/worker:tag:0/restart", "", ""},
		{"POST", "/api/v1/workers/worker:../x/restart", "", ""},
		{"POST", "/api/v1/workers/worker:..%2Fx/stop", "", ""},
		{"POST", "/api/v1/workers/worker:tag:99999999999999999999/reset?restart=true", "", ""},
		{"POST", "/api/v1/queues/tag/pause", "{}", "application/json"},
		{"POST", "/api/v1/queues/Q%00/resume", "", ""},
		{"POST", "/api/v1/pause", "", ""},
		{"POST", "/api/v1/queues/tag/jobs", `{"type":"t","payload":{"a":[1,2,3]}}`, "application/json"},
		{"POST", "/api/v1/queues/tag/jobs", `{"type":"t","delay_seconds":-1e309}`, "application/json"},
		{"POST", "/api/v1/queues/tag/jobs", `{"type":"t","max_retry":1e20}`, "application/json"},
		{"POST", "/api/v1/queues/tag/jobs", `{"type":`, "application/json"},
		{"POST", "/api/v1/queues/tag/jobs", `{"type":"t"}`, "application/cbor"},
		{"POST", "/api/v1/queues/tag/jobs", "\xff\xfe", "text/plain; charset=utf-16"},
		{"GET", "/api/v1/queues/tag/jobs?state=archived&page=-1&page_size=1e9", "", ""},
		{"GET", "/api/v1/jobs/tag/..%2F..%2Fx", "", ""},
		{"POST", "/api/v1/jobs/tag/x/retry", "", ""},
		{"DELETE", "/api/v1/jobs/tag/x", "", ""},
		{"POST", "/api/v1/session", `{"token":null}`, "application/json"},
		{"DELETE", "/api/v1/session", "", ""},
		{"GET", "/docs/../openapi.json", "", ""},
		{"OPTIONS", "/", "", ""},
		{"GET", "/api/v1/health?x=%zz", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.body, s.ctype)
	}
	h := newHarness(f, setup{})
	fix := strings.NewReplacer("/tag/", "/"+h.q1+"/", ":tag:", ":"+h.q1+":")
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}
	f.Fuzz(func(t *testing.T, method, path, body, ctype string) {
		h := h.with(t)
		if !validMethod(method) {
			method = methods[len(method)%len(methods)]
		}
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n#") || !validURL(path) {
			return // not a request line a server can receive
		}
		path = fix.Replace(path)
		before := h.dump()
		rec := h.do(req{method: method, path: path, body: body, ctype: ctype, token: testToken})
		if rec.Code >= 500 {
			t.Fatalf("%s %s (%q, %q): %d %s", method, path, body, ctype, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%s %s: %d with Content-Type %q", method, path, rec.Code, ct)
			}
			if d := diff(before, h.dump()); len(d) > 0 {
				t.Fatalf("%s %s (%q): rejected with %d but changed Redis: %v", method, path, body, rec.Code, d)
			}
		}
	})
}

func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

func validURL(p string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := http.NewRequest(http.MethodGet, "http://x"+p, nil)
	return err == nil
}
