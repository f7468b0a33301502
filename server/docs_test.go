package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/web"
)

func TestDocsAndSpecRoutes(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.AuthReads = true }})
	tests := []struct {
		path, ctype, contains string
	}{
		{"/docs", "text/html", "docs/init.js"},
		{"/docs/init.js", "text/javascript", `url: "openapi.json"`},
		{"/docs/swagger-ui-bundle.js", "text/javascript", "SwaggerUIBundle"},
		{"/docs/swagger-ui-standalone-preset.js", "text/javascript", "SwaggerUIStandalonePreset"},
		{"/docs/swagger-ui.css", "text/css", ".swagger-ui"},
		{"/docs/favicon-32x32.png", "image/png", "PNG"},
		{"/", "text/html", `href="docs"`},
		{"/openapi.json", "application/openapi+json", `"openapi":"3.1.0"`},
		{"/openapi.yaml", "application/openapi+yaml", "openapi: 3.1.0"},
		{"/openapi-3.0.json", "application/openapi+json", `"openapi":"3.0.3"`},
		{"/openapi-3.0.yaml", "application/openapi+yaml", "openapi: 3.0.3"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			// No token: these are open even with auth_reads.
			rec := h.do(req{method: http.MethodGet, path: tt.path})
			if rec.Code != http.StatusOK {
				t.Fatalf("%d (want 200, no redirect): %s", rec.Code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tt.ctype) {
				t.Errorf("Content-Type %q, want %s", ct, tt.ctype)
			}
			if !strings.Contains(rec.Body.String(), tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
			if strings.HasPrefix(tt.path, "/docs") || tt.path == "/" {
				if csp := rec.Header().Get("Content-Security-Policy"); csp != web.ContentSecurityPolicy {
					t.Errorf("CSP %q", csp)
				}
			}
		})
	}
	page := h.do(req{method: http.MethodGet, path: "/docs"}).Body.String()
	for _, bad := range []string{"<script>", "style=", "http://", "https://", "<style"} {
		if strings.Contains(page, bad) {
			t.Errorf("docs page contains %q: inline code or a remote asset", bad)
		}
	}
	for _, p := range []string{"/docs/", "/docs/nope.js", "/docs/swagger-ui.js.map", "/schemas/Worker.json"} {
		if rec := h.do(req{method: http.MethodGet, path: p}); rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
	}
}

// TestMountedUnderPrefix mounts the handler under /admin/ as the embed
// example does: the docs, the spec's server and the cookie path follow.
func TestMountedUnderPrefix(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.BasePath = "/admin" }})
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", h.h))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("host app")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}
	resp, body := get("/admin/docs")
	if resp.StatusCode != 200 || !strings.Contains(body, `src="docs/init.js"`) {
		t.Fatalf("/admin/docs: %d", resp.StatusCode)
	}
	// The page's relative URLs resolve under the prefix.
	base := resp.Request.URL
	for _, rel := range []string{"docs/init.js", "docs/swagger-ui-bundle.js", "openapi.json"} {
		u, _ := base.Parse(rel)
		if r, _ := get(u.Path); r.StatusCode != 200 {
			t.Errorf("%s (from %s): %d", u.Path, rel, r.StatusCode)
		}
	}
	_, spec := get("/admin/openapi.json")
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	if err := json.Unmarshal([]byte(spec), &doc); err != nil || len(doc.Servers) != 1 || doc.Servers[0].URL != "/admin/" {
		t.Errorf("servers = %+v (%v)", doc.Servers, err)
	}
	if r, body := get("/admin/api/v1/workers"); r.StatusCode != 200 || !strings.Contains(body, `"workers"`) {
		t.Errorf("/admin/api/v1/workers: %d %s", r.StatusCode, body)
	}
	if _, body := get("/elsewhere"); body != "host app" {
		t.Errorf("host app route: %q", body)
	}
	rec := h.do(req{method: http.MethodPost, path: "/api/v1/session", body: `{"token":"` + testToken + `"}`})
	if c := rec.Result().Cookies(); len(c) != 1 || c[0].Path != "/admin/" {
		t.Errorf("cookie = %+v, want path /admin/", c)
	}
}
