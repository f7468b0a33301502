package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	swaggerfiles "github.com/swaggo/files/v2"
)

//go:embed swagger dashboard
var files embed.FS

// ContentSecurityPolicy is sent with every page of this package: everything
// from the same origin, no inline script, no frames. data: images are
// allowed because Swagger UI's stylesheet draws its icons with data: SVGs
// (they load nothing from anywhere); the one inline style Swagger UI
// 5.18.2 injects is allowed by its hash (headless Chromium reports no
// violation with this policy).
const ContentSecurityPolicy = "default-src 'self'; img-src 'self' data:; " +
	"style-src 'self' 'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='; object-src 'none'; " +
	"frame-ancestors 'none'; base-uri 'self'; form-action 'self'"

// swaggerAssets are the files of swagger-ui-dist the page loads.
var swaggerAssets = map[string]string{
	"swagger-ui-bundle.js":            "text/javascript; charset=utf-8",
	"swagger-ui-standalone-preset.js": "text/javascript; charset=utf-8",
	"swagger-ui.css":                  "text/css; charset=utf-8",
	"favicon-32x32.png":               "image/png",
	"favicon-16x16.png":               "image/png",
}

// modTime is the build's start, for conditional requests of the assets.
var modTime = time.Now()

// Docs serves Swagger UI: the page at /docs and its assets at /docs/<file>,
// paths relative to where it is mounted. The page loads the spec from
// openapi.json next to it.
func Docs() http.Handler {
	page := mustRead("swagger/index.html")
	initJS := mustRead("swagger/init.js")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		name := path.Base(r.URL.Path)
		switch {
		case r.URL.Path == "/docs":
			serve(w, r, "index.html", "text/html; charset=utf-8", page, false)
		case name == "init.js":
			serve(w, r, name, "text/javascript; charset=utf-8", initJS, false)
		case swaggerAssets[name] != "":
			b, err := fs.ReadFile(swaggerfiles.FS, name)
			if err != nil {
				http.NotFound(w, r)
				return
			}
			serve(w, r, name, swaggerAssets[name], b, true)
		default:
			http.NotFound(w, r)
		}
	})
}

// Home serves the dashboard's page at "/". It loads its scripts and
// stylesheets from dashboard/<file> (Dashboard) and its data from the API,
// paths relative to where it is mounted.
func Home() http.Handler {
	page := newAsset("dashboard/index.html", "text/html; charset=utf-8")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		page.serve(w, r, "index.html")
	})
}

// dashboardAssets are the files of the dashboard besides its page, by the
// name they are served under: its own, and the vendored charting library
// (dashboard/vendor/uplot, see its README).
var dashboardAssets = map[string]*asset{
	"app.js":            newAsset("dashboard/app.js", jsType),
	"dom.js":            newAsset("dashboard/dom.js", jsType),
	"fields.js":         newAsset("dashboard/fields.js", jsType),
	"charts.js":         newAsset("dashboard/charts.js", jsType),
	"app.css":           newAsset("dashboard/app.css", cssType),
	"uPlot.iife.min.js": newAsset("dashboard/vendor/uplot/uPlot.iife.min.js", jsType),
	"uPlot.min.css":     newAsset("dashboard/vendor/uplot/uPlot.min.css", cssType),
}

const (
	jsType  = "text/javascript; charset=utf-8"
	cssType = "text/css; charset=utf-8"
)

// DashboardAssets names the files Dashboard serves.
func DashboardAssets() []string {
	names := make([]string, 0, len(dashboardAssets))
	for n := range dashboardAssets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Dashboard serves the dashboard's assets at dashboard/<file>.
func Dashboard() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		name := path.Base(r.URL.Path)
		a, ok := dashboardAssets[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		a.serve(w, r, name)
	})
}

// asset is an embedded file of the dashboard, also gzipped (once, at
// start) for the browsers that accept it.
type asset struct {
	ctype     string
	raw, gzip []byte
}

func newAsset(name, ctype string) *asset {
	raw := mustRead(name)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(raw) // to memory: cannot fail
	_ = zw.Close()
	return &asset{ctype: ctype, raw: raw, gzip: buf.Bytes()}
}

func (a *asset) serve(w http.ResponseWriter, r *http.Request, name string) {
	w.Header().Add("Vary", "Accept-Encoding")
	b := a.raw
	if acceptsGzip(r) && r.Header.Get("Range") == "" {
		w.Header().Set("Content-Encoding", "gzip")
		b = a.gzip
	}
	serve(w, r, name, a.ctype, b, false)
}

// acceptsGzip reads Accept-Encoding: gzip listed without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
				return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
			}
		}
	}
	return false
}

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

func serve(w http.ResponseWriter, r *http.Request, name, ctype string, b []byte, cache bool) {
	w.Header().Set("Content-Type", ctype)
	if cache {
		w.Header().Set("Cache-Control", "public, max-age=86400")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, name, modTime, bytes.NewReader(b))
}

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("web: embedded file missing: " + name)
	}
	return b
}
