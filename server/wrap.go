package server

import (
	"encoding/json"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// wrap adds what every request gets, matched or not: a canonical path (no
// redirects), problem details for unmatched routes, the body cap (413, the
// connection closed) and a deadline for reading the body, and a 500
// problem instead of a dropped connection on a panic.
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
		if r.ContentLength > s.cfg.MaxBody {
			// Refused before a byte of it is read, and the connection
			// closed: Huma would stop reading at the cap, and net/http,
			// which discards an unread rest of up to 256 KB only, would
			// parse a longer rest as the next request on the connection (a
			// request smuggled in a body). A client that never sends the
			// body it declared is not waited for either. A chunked body
			// has no such rest: net/http closes the connection itself when
			// more than 256 KB of it is left.
			w.Header().Set("Connection", "close")
			writeProblem(w, http.StatusRequestEntityTooLarge, "request body is too large limit="+strconv.Itoa(int(s.cfg.MaxBody))+" bytes")
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyReadTimeout))
			body := &bodyReader{ReadCloser: r.Body}
			// The handlers get a copy of the request: net/http judges what
			// is left of a body by the original's (a body declared far
			// larger than what came closes the connection at once; given
			// a body of another type it would wait for the rest).
			r = r.WithContext(r.Context())
			r.Body, w = body, &bodyErrorWriter{ResponseWriter: w, body: body}
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

// bodyReader remembers why reading the request body failed.
type bodyReader struct {
	io.ReadCloser
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// bodyErrorWriter answers 400 rather than Huma's 500 when the body could
// not be read because the client sent a broken one (a bad chunk, a
// connection closed mid-body): the client's fault, not the server's. Huma
// itself answers 413 for a body over the cap and 408 for a read timeout.
type bodyErrorWriter struct {
	http.ResponseWriter
	body     *bodyReader
	replaced bool
}

func (w *bodyErrorWriter) WriteHeader(code int) {
	if code == http.StatusInternalServerError && w.body.err != nil {
		w.replaced = true
		writeProblem(w.ResponseWriter, http.StatusBadRequest, "cannot read the request body: "+w.body.err.Error())
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *bodyErrorWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *bodyErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
