package server

import (
	"encoding/json"
	"net/http"
	"path"
	"strings"
	"time"
)

// wrap adds what every request gets, matched or not: a canonical path (no
// redirects), problem details for unmatched routes, a deadline for reading
// the body, and a 500 problem instead of a dropped connection on a panic.
func (s *server) wrap(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic in admin handler", "method", r.Method, "path", r.URL.Path, "panic", v)
				writeProblem(w, http.StatusInternalServerError, "internal error")
			}
		}()
		p := r.URL.Path
		if p == "" || p[0] != '/' || (p != "/" && path.Clean(p) != strings.TrimSuffix(p, "/")) || strings.Contains(p, "//") {
			writeProblem(w, http.StatusBadRequest, "path is not canonical (no ., .. or empty segments)")
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyReadTimeout))
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			// Let the mux decide between 404 and 405 (with its Allow header),
			// but answer with a problem detail.
			mux.ServeHTTP(&problemWriter{ResponseWriter: w}, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// problemWriter turns the mux's plain-text error into a problem detail.
type problemWriter struct {
	http.ResponseWriter
	wrote bool
}

func (p *problemWriter) WriteHeader(code int) {
	if p.wrote {
		return
	}
	p.wrote = true
	msg := "no such route"
	if code == http.StatusMethodNotAllowed {
		msg = "method not allowed here (see Allow)"
	}
	writeProblem(p.ResponseWriter, code, msg)
}

func (p *problemWriter) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

// problem is an RFC 9457 problem detail, shaped like Huma's ErrorModel.
type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(problem{Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
