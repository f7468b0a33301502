// Package web holds the admin server's static pages, embedded in the binary
// so that nothing is loaded from a CDN: Swagger UI (the swagger-ui-dist
// files of github.com/swaggo/files/v2, with our own page and initializer so
// that the page runs under a same-origin Content-Security-Policy) and the
// dashboard at "/" (plain HTML, CSS and JavaScript: no build step, live
// over EventSource).
//
// It knows nothing of the API: the server mounts its handlers. It must not
// import other Vigil packages.
package web
