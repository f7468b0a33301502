package web_test

import (
	"bytes"
	"compress/gzip"
	"io"
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
	if assets != 7 {
		t.Errorf("%d dashboard assets referenced, want app.js, its three modules (preloaded), app.css and uPlot's script and stylesheet", assets)
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

func getAsset(t *testing.T, name string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/dashboard/"+name, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	web.Dashboard().ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d", name, rec.Code)
	}
	return rec
}

// TestDashboardModulesResolve: every module the scripts import is one
// Dashboard serves (the page names only app.js), and every asset it
// serves is used.
func TestDashboardModulesResolve(t *testing.T) {
	used := map[string]bool{"app.js": true, "app.css": true, "uPlot.iife.min.js": true, "uPlot.min.css": true}
	importRe := regexp.MustCompile(`(?m)^\s*(?:import|export)\b[^;]*?\bfrom\s+'([^']+)'`)
	for _, name := range web.DashboardAssets() {
		if !strings.HasSuffix(name, ".js") || strings.Contains(name, "uPlot") {
			continue
		}
		for _, m := range importRe.FindAllStringSubmatch(getAsset(t, name, nil).Body.String(), -1) {
			ref, ok := strings.CutPrefix(m[1], "./")
			if !ok || strings.Contains(ref, "/") {
				t.Errorf("%s imports %q: want ./<file> beside it", name, m[1])
				continue
			}
			getAsset(t, ref, nil)
			used[ref] = true
		}
	}
	for _, name := range web.DashboardAssets() {
		if !used[name] {
			t.Errorf("%s is served but neither the page nor a script loads it", name)
		}
	}
}

// TestDashboardScriptsWriteNoHTML: the dashboard's own scripts never parse
// data as HTML (everything from the API is text) nor evaluate strings.
func TestDashboardScriptsWriteNoHTML(t *testing.T) {
	bad := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|createContextualFragment|DOMParser|srcdoc`)
	for _, name := range web.DashboardAssets() {
		if !strings.HasSuffix(name, ".js") || strings.Contains(name, "uPlot") {
			continue
		}
		if m := bad.FindString(getAsset(t, name, nil).Body.String()); m != "" {
			t.Errorf("%s uses %s", name, m)
		}
	}
}

// TestDashboardGzip: assets go gzipped to clients that accept it, the same
// bytes once unzipped, and plain to the others.
func TestDashboardGzip(t *testing.T) {
	for _, name := range web.DashboardAssets() {
		plain := getAsset(t, name, nil)
		if plain.Header().Get("Content-Encoding") != "" || !strings.Contains(plain.Header().Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s without Accept-Encoding: %v", name, plain.Header())
		}
		zipped := getAsset(t, name, map[string]string{"Accept-Encoding": "br, gzip;q=0.8"})
		if zipped.Header().Get("Content-Encoding") != "gzip" {
			t.Errorf("%s: Content-Encoding %q", name, zipped.Header().Get("Content-Encoding"))
			continue
		}
		zlen := zipped.Body.Len()
		zr, err := gzip.NewReader(zipped.Body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, plain.Body.Bytes()) {
			t.Errorf("%s: gunzipped differs from the plain file (%v)", name, err)
		}
		if zlen >= plain.Body.Len() {
			t.Errorf("%s: gzipped %d bytes, plain %d", name, zlen, plain.Body.Len())
		}
		if rec := getAsset(t, name, map[string]string{"Accept-Encoding": "gzip;q=0"}); rec.Header().Get("Content-Encoding") != "" {
			t.Errorf("%s: gzipped for gzip;q=0", name)
		}
	}
}
