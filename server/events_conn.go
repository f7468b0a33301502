package server

import (
	"bytes"
	"net"
	"net/http"
	"time"
)

// hijack takes an event stream's connection from net/http when it can: an
// HTTP/1.1 request whose ResponseWriter (or one it unwraps to) can be
// hijacked. nil otherwise (HTTP/2, HTTP/1.0, a wrapper that hides it):
// the stream is then written through the response.
//
// Why: for as long as a stream lasts, net/http keeps per connection its
// read and write buffers (4 KiB each), the response's own 2 KiB, the
// request and the goroutine that served it, which is most of what a client
// costs (BenchmarkEventFanout's memory per client; BENCHMARKS.md). Taken,
// the connection keeps only what the stream uses; the handler returns and
// the broker serves it (stream, watchConn, end), writing the response as net/http would: a status line,
// the header, HTTP/1.1 chunks, the last chunk when it ends.
//
// Not when a wrapper has declared it transforms the body (an embedder's
// compression middleware sets Content-Encoding before it calls the
// handler, and passes Hijack through): the stream written past it would
// not be what the header says, and a client would read garbage.
func hijack(w http.ResponseWriter, r *http.Request) net.Conn {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 || w.Header().Get("Content-Encoding") != "" {
		return nil
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	return conn
}

// writeHead writes the head of a 200 response with header h, chunked, to a
// hijacked connection, which is closed when the stream ends.
func writeHead(conn net.Conn, h http.Header) error {
	if h.Get("Date") == "" {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	h.Del("Content-Length")
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = h.Write(&b)
	b.WriteString("\r\n")
	_, err := conn.Write(b.Bytes())
	return err
}
