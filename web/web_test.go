package web_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/web"
)

// TestDocsPageLoadsOnlyItsOwnAssets: every script and stylesheet of the
// page is a relative URL this handler serves, none is inline, and the CSP
// allows only the same origin.
func TestDocsPageLoadsOnlyItsOwnAssets(t *testing.T) {
	h := web.Docs()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/docs", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/docs: %d", rec.Code)
	}
	page := rec.Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 5 {
		t.Fatalf("only %d asset references in the page", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "/") {
			t.Errorf("asset %q is not relative to the page", ref)
			continue
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+ref, nil))
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			t.Errorf("%s: %d", ref, rec.Code)
		}
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]+</script>|<style|style=|on[a-z]+=`).MatchString(page) {
		t.Error("the page has inline script or style")
	}
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "http") {
		t.Errorf("CSP %q allows inline code or another origin", csp)
	}
}

// TestDashboardLoadsOnlyItsOwnAssets: the dashboard's page links the docs,
// loads only relative assets that Dashboard serves, has no inline code,
// and is sent under the same-origin CSP.
func TestDashboardLoadsOnlyItsOwnAssets(t *testing.T) {
	rec := httptest.NewRecorder()
	web.Home().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	page := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(page, `href="docs"`) || rec.Header().Get("Content-Security-Policy") != web.ContentSecurityPolicy {
		t.Fatalf("/: %d %s", rec.Code, page)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	assets := 0
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "/") {
			t.Errorf("reference %q is not relative to the page", ref)
		}
		if !strings.HasPrefix(ref, "dashboard/") {
			continue
		}
		assets++
		rec := httptest.NewRecorder()
		web.Dashboard().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+ref, nil))
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 || rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("%s: %d", ref, rec.Code)
		}
	}
	if assets != 2 {
		t.Errorf("%d dashboard assets referenced, want app.js and app.css", assets)
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]+</script>|<style|style=|\son[a-z]+=`).MatchString(page) {
		t.Error("the page has inline script or style")
	}
	rec = httptest.NewRecorder()
	web.Dashboard().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/secret.txt", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("unknown asset: %d", rec.Code)
	}
}
