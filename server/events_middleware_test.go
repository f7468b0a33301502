package server_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// compressWriter is gorilla/handlers' CompressHandler as it is written:
// Content-Encoding set before the handler runs, Hijack passed through.
type compressWriter struct {
	io.Writer
	http.ResponseWriter
	http.Hijacker
	http.Flusher
}

func (w *compressWriter) Write(b []byte) (int, error) { return w.Writer.Write(b) }
func (w *compressWriter) Flush() {
	_ = w.Writer.(*gzip.Writer).Flush()
	w.Flusher.Flush()
}

func compress(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		w.Header().Set("Content-Encoding", "gzip")
		hj, _ := w.(http.Hijacker)
		fl, _ := w.(http.Flusher)
		h.ServeHTTP(&compressWriter{Writer: gz, ResponseWriter: w, Hijacker: hj, Flusher: fl}, r)
	})
}

// TestEventsThroughCompressingMiddleware: an embedder's compression
// middleware declares the body gzip-encoded and passes Hijack through. The
// broker took the connection anyway and wrote the stream plain under that
// header: every client read "gzip: invalid header" (and net/http logged
// the middleware's writes to a taken connection). Such a stream is now
// written through the response.
func TestEventsThroughCompressingMiddleware(t *testing.T) {
	h := newHarness(t, setup{})
	base := serveHTTP(t, compress(h.h))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events?topic="+h.id(0).Topic(), nil)
	r.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(r) // asks for gzip, and decodes it
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !resp.Uncompressed || resp.Close {
		t.Errorf("uncompressed=%v close=%v, want a gzip stream net/http serves (decoded, kept alive)", resp.Uncompressed, resp.Close)
	}
	br := bufio.NewReader(resp.Body)
	h.emit(h.id(0).Topic(), "through gzip")
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read the stream through the middleware: %v (got %q)", err, line)
		}
		if strings.Contains(line, "through gzip") {
			return
		}
	}
}
