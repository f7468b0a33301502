package chaos_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// rawReq is one HTTP/1.1 request written byte for byte, so that it can be
// as malformed as a hostile client likes.
type rawReq struct {
	label   string // category, for the report
	method  string
	target  string   // the request-target, sent as is
	headers []string // "Name: value" lines; Host is added unless noHost
	body    []byte
	noHost  bool
	noLen   bool   // no Content-Length for a body (it then is garbage)
	raw     []byte // sent instead of everything above
}

func (r rawReq) bytes() []byte {
	if r.raw != nil {
		return r.raw
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", r.method, r.target)
	if !r.noHost {
		b.WriteString("Host: 127.0.0.1\r\n")
	}
	for _, h := range r.headers {
		b.WriteString(h + "\r\n")
	}
	if len(r.body) > 0 && !r.noLen {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(r.body))
	}
	b.WriteString("\r\n")
	b.Write(r.body)
	return b.Bytes()
}

func (r rawReq) String() string {
	s := r.method + " " + r.target
	if r.raw != nil {
		s = fmt.Sprintf("raw %q", r.raw)
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return r.label + ": " + s
}

// rawResult is what came back.
type rawResult struct {
	status int
	ctype  string
	body   []byte
	err    error // no response (the server closed the connection)
}

// rawClient sends rawReqs over one keep-alive connection, opening a new one
// when the server closed the last.
type rawClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

func (c *rawClient) do(r rawReq) rawResult {
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil
		res, retry := c.try(r)
		if !retry || !reused || attempt > 0 {
			return res
		}
		// The server had closed the idle connection: a fresh one.
	}
}

func (c *rawClient) try(r rawReq) (res rawResult, retry bool) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return rawResult{err: err}, false
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	_ = c.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.conn.Write(r.bytes()); err != nil {
		c.close()
		return rawResult{err: err}, true
	}
	if r.raw != nil {
		// Nothing more comes: a server waiting for the end of a line that
		// never ends reads EOF now, not at its header timeout.
		_ = c.conn.(*net.TCPConn).CloseWrite()
	}
	method := r.method
	if r.raw != nil {
		method = http.MethodGet
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.close()
		return rawResult{err: err}, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	res = rawResult{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
	if strings.HasPrefix(res.ctype, "text/event-stream") {
		// An event stream never ends: the answer is its status.
		c.close()
		return res, false
	}
	res.body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.Close || r.raw != nil || r.noLen {
		// A raw or length-less request may have left bytes the server
		// reads as another request: never reuse its connection.
		c.close()
	}
	return res, false
}
