package web

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
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

// Home serves the dashboard's page at "/". It loads its script and
// stylesheet from dashboard/<file> (Dashboard) and its data from the API,
// paths relative to where it is mounted.
func Home() http.Handler {
	page := mustRead("dashboard/index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		serve(w, r, "index.html", "text/html; charset=utf-8", page, false)
	})
}

// dashboardAssets are the files of the dashboard besides its page.
var dashboardAssets = map[string]string{
	"app.js":  "text/javascript; charset=utf-8",
	"app.css": "text/css; charset=utf-8",
}

// Dashboard serves the dashboard's assets at dashboard/<file>.
func Dashboard() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		name := path.Base(r.URL.Path)
		ctype, ok := dashboardAssets[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		serve(w, r, name, ctype, mustRead("dashboard/"+name), false)
	})
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
