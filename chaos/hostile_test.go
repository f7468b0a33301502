package chaos_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// marker is in every hostile value, so that MONITOR shows where one
// reached Redis.
const marker = "zq9"

// specOp is one operation of the served OpenAPI document.
type specOp struct {
	method, path string
	params       []string // path parameters, in order
	body         bool
	write        bool // its security requires the bearer token
}

// specOps reads the operations from the host's /openapi.json.
func specOps(t *testing.T, h *host) []specOp {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
			RequestBody json.RawMessage       `json:"requestBody"`
			Security    []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	h.must(http.MethodGet, "/openapi.json", nil, http.StatusOK, &doc)
	var ops []specOp
	for p, methods := range doc.Paths {
		for m, op := range methods {
			o := specOp{method: strings.ToUpper(m), path: p, body: op.RequestBody != nil}
			for _, prm := range op.Parameters {
				if prm.In == "path" {
					o.params = append(o.params, prm.Name)
				}
			}
			o.write = len(op.Security) == 1 && op.Security[0]["bearer"] != nil
			ops = append(ops, o)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	if len(ops) < 25 {
		t.Fatalf("only %d operations in the spec", len(ops))
	}
	return ops
}

// fill puts values into a path template, well-formed ones for every
// parameter not in over.
func fill(path string, over map[string]string) string {
	def := map[string]string{"component": "worker:tag:0", "queue": "tag", "host": "h1", "id": marker + "-task"}
	for _, name := range []string{"component", "queue", "host", "id"} {
		v, ok := over[name]
		if !ok {
			v = def[name]
		}
		path = strings.ReplaceAll(path, "{"+name+"}", v)
	}
	return path
}

// hostileValues are path parameter values that no route may take as a
// name of anything that exists: traversal, encodings, injection, limits.
var hostileValues = []string{
	"", ".", "..", "...", "%2e%2e", "%252e%252e", "../" + marker, "..%2f" + marker, "..%5c" + marker, "%2F",
	marker + "%2F..%2F..%2Fetc%2Fpasswd", marker + "%00", marker + "%0d%0aX-Injected:%201", marker + "%20x", marker + "*", "*",
	"{" + marker + "}", "%7B" + marker + "%7D", marker + "}", marker + "{", marker + ":0", "worker:" + marker, "worker:" + marker + ":0:1",
	"worker:tag:-1", "worker:tag:01", "worker:tag:1e3", "worker:tag:0x1", "worker:tag:99999999", "worker:TAG:0", "worker:tag:%200",
	"worker::0", "worker:tag:", ":tag:0", "WORKER:tag:0", "worker:tag:0:" + marker, "worker:%7Btag%7D:0", "worker:tag%7D:0",
	marker + strings.Repeat("a", 100), marker + strings.Repeat("z", 10000), "ZQ9", marker + "%C3%A9", marker + "%ff", marker + "%",
	marker + "%zz", marker + "%u0041", marker + "%5C", marker + "'", marker + "%22", marker + "%3Cscript%3E", marker + "%3Brm",
	marker + "$(id)", marker + "%60", marker + "%7C", marker + "&x", marker + "+", "-" + marker, "_" + marker, marker + "..",
	"asynq:%7Btag%7D:pending", "vigil:control", "vigil:*", "*:*", "tag%7D:pending", "tag%0d%0a", "%00", "%ff%fe",
	marker + "%e2%80%ae", "%F0%9F%92%A5" + marker, "-1", "NaN", "null", "%5B%5D", "%7B%7D", marker + "%2500", "tag:" + marker,
	"tag%2f" + marker, "tag/" + marker, "tag%3F" + marker, "tag%23" + marker,
}

// randomHostile returns a random value with a brace in it (no name of any
// kind may hold one) and the marker.
func randomHostile(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:~!$&'()*+,;=@"
	pieces := []string{"%7B", "%7D", "%00", "%0A", "%2F", "%25", "%C3%A9", "%FF", "..", "{", "}", ":", marker}
	var b strings.Builder
	n := 1 + rng.IntN(60)
	for range n {
		if rng.IntN(4) == 0 {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		} else {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
	}
	s := b.String()
	at := rng.IntN(len(s) + 1)
	return s[:at] + "%7B" + marker + s[at:]
}

// invalidBodies are request bodies that no operation may accept.
var invalidBodies = []string{
	``, `{`, `}`, `[`, `]`, `{"type":`, `{"type":"t"`, `{"type":"t",}`, `{"type":"t"}}`, `{"type":"t"} x`, `null`, `true`, `1`,
	`"x"`, `[]`, `[{"type":"t"}]`, `{}`, `{"type":""}`, `{"type":1}`, `{"type":null}`, `{"type":["t"]}`, `{"type":{"a":1}}`,
	`{"type":"` + marker + `{x}"}`, `{"type":"t","task_id":"` + marker + `{"}`, `{"type":"t","task_id":"` + marker + `:x"}`,
	`{"type":"t","delay_seconds":-1}`, `{"type":"t","delay_seconds":1e309}`, `{"type":"t","delay_seconds":"1"}`,
	`{"type":"t","max_retry":-1}`, `{"type":"t","max_retry":1e20}`, `{"type":"t","max_retry":1.5}`, `{"type":"t","max_retry":1001}`,
	`{"type":"t","timeout_seconds":-5}`, `{"type":"t","unique_seconds":1e12}`, `{"type":"t","` + marker + `":1}`,
	`{"type":"` + strings.Repeat("t", 201) + `"}`, `{"type":"t","task_id":"` + strings.Repeat("i", 129) + `"}`,
	`{"type":"\u0000"}`, "{\"type\":\"t\xff\"}", "\xef\xbb\xbf{\"type\":\"t\"", `{"type":"t","type":`,
	strings.Repeat("[", 100000), strings.Repeat(`{"a":`, 10000), `{"size":-1}`, `{"size":1e9}`, `{"size":"1"}`,
	`{"size":null}`, `{"size":1001}`, `{"size":2.5}`, `{"size":[1]}`, `{"size":1,"` + marker + `":2}`, `{"token":1}`,
	`{"token":null}`, `{"token":["x"]}`, `{"token":"` + strings.Repeat("t", 5000) + `"}`, `{"token":"wrong-` + marker + `"}`,
	`{"type":"t","payload":` + strings.Repeat("[", 10000) + `}`, "\x00\x01\x02", strings.Repeat("\xff", 1000), `NaN`, `{"type":NaN}`,
	`{"type":"t","delay_seconds":Infinity}`, `{'type':'t'}`, `{type:"t"}`, `{"type":"t"/*c*/}`,
}

var contentTypes = []string{"application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
	"application/json; charset=utf-16", "application/cbor", "application/xml", "", "application/merge-patch+json", "*/*"}

// eventsProbes are subscriptions and resume points for GET /api/v1/events.
var eventsTopics = []string{"", marker, "*", "**", "*:*:*:*:*", "worker:*:*:*:status", "queue:", ":", "::", "worker:" + marker + "{x}:0:status",
	strings.Repeat("a", 10000), strings.Repeat("worker:*:", 100), "%00", "%ff", "job:tag:" + marker + "%0d%0a", "*status", "worker*"}
var lastEventIDs = []string{"", marker, "-", "+", "$", ">", "0", "0-0", "1-0", "-1", "1-", "-0", "18446744073709551616-0",
	"1-18446744073709551616", "9999999999999-0", "1-1-1", "1.5-0", "0x10-0", " 1-0", strings.Repeat("9", 65), strings.Repeat("1", 10000),
	marker + "%0d%0a", "1-0%00", "é", "%F0%9F%92%A5"}

// hostileRequests builds at least n malformed requests from the spec.
func hostileRequests(ops []specOp, n int) []rawReq {
	rng := rand.New(rand.NewPCG(7, 7))
	auth := "Authorization: Bearer " + testToken
	var out []rawReq
	add := func(r rawReq) {
		if r.label == "" {
			r.label = "other"
		}
		out = append(out, r)
	}
	paths := map[string][]string{} // path → its methods
	for _, op := range ops {
		paths[op.path] = append(paths[op.path], op.method)
	}

	// Path parameters: hostile values, raw, escaped and escaped twice.
	for _, op := range ops {
		for _, prm := range op.params {
			vals := slices.Clone(hostileValues)
			for range 200 {
				vals = append(vals, randomHostile(rng))
			}
			for _, v := range vals {
				for _, enc := range []string{v, url.PathEscape(v), url.PathEscape(url.PathEscape(v))} {
					r := rawReq{label: "path parameter", method: op.method, target: fill(op.path, map[string]string{prm: enc}), headers: []string{auth}}
					if op.body {
						r.headers = append(r.headers, "Content-Type: application/json")
						r.body = []byte(`{"type":"t","size":1,"token":"x"}`)
					}
					add(r)
				}
			}
		}
	}
	// Wrong methods on every path.
	for p, allowed := range paths {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND", "ZQ9", "get", "post", "CONNECT"} {
			if slices.Contains(allowed, m) || (m == "GET" && slices.Contains(allowed, "GET")) {
				continue
			}
			add(rawReq{label: "wrong method", method: m, target: fill(p, nil), headers: []string{auth}})
		}
	}
	// Traversal and non-canonical targets.
	for _, target := range []string{"/..", "/../../etc/passwd", "/api/v1/../../../etc/passwd", "/api/v1/workers/../../../etc/passwd",
		"/%2e%2e/%2e%2e/etc/passwd", "/api/v1/%2e%2e/pause", "/docs/../api/v1/pause", "/docs/%2e%2e%2fapi%2fv1%2fpause", "/api/v1/./pause",
		"/api/v1//pause", "//api/v1/pause", "/api/v1/pause/", "/api/v1/pause/.", "/api/v1/pause%00", "/api/v1/pause%2f", "/api/v1/pause%2F..",
		"\\api\\v1\\pause", "/api/v1/pause;x", "/./", "/.%2e/", "/docs/..%5c..%5cetc%5cpasswd", "/openapi.json/../api/v1/pause",
		"/API/V1/PAUSE", "/api/v1/Pause", "*", "/%", "/%zz", "/..;/api/v1/pause", "/api/v1/queues/tag/../other/pause",
		"/api/v1/queues/tag/%2e%2e/pause", "/api/v1/workers/worker:tag:0/../../pause", "/docs/" + strings.Repeat("../", 50),
		"/" + strings.Repeat("a/", 2000), "/api/v1/" + strings.Repeat("%2e%2e%2f", 100), "/api/v1/pause%3Fx", "/api/v1/pause%23"} {
		for _, m := range []string{"GET", "POST", "DELETE"} {
			add(rawReq{label: "traversal", method: m, target: target, headers: []string{auth}})
		}
	}
	// Query parameters.
	for _, q := range []string{"state=" + marker, "state=", "state=PENDING", "page=-1", "page=0", "page=1e9", "page=100001", "page=a",
		"page_size=0", "page_size=501", "page_size=-5", "page_size=" + strings.Repeat("9", 100), "state=" + strings.Repeat("x", 10000),
		"page=1&page=-1", "%zz", "state=%zz", "page=1;page_size=2", "state=pending%00", "state=active&state=" + marker, "=", "&&&",
		"state=%F0%9F%92%A5", "page=%2B1", "page= 1", "page=1.0"} {
		add(rawReq{label: "query", method: "GET", target: "/api/v1/queues/tag/jobs?" + q, headers: []string{auth}})
		add(rawReq{label: "query", method: "POST", target: "/api/v1/workers/worker:tag:0/reset?restart=" + strings.SplitN(q, "=", 2)[len(strings.SplitN(q, "=", 2))-1] + marker, headers: []string{auth}})
	}
	// Bodies: invalid JSON and values under every content type, to every
	// operation that takes a body.
	for _, op := range ops {
		if !op.body {
			continue
		}
		for _, b := range invalidBodies {
			for _, ct := range contentTypes {
				h := []string{auth}
				if ct != "" {
					h = append(h, "Content-Type: "+ct)
				}
				add(rawReq{label: "body", method: op.method, target: fill(op.path, nil), headers: h, body: []byte(b)})
			}
		}
	}
	// Headers: huge, many, broken.
	big := func(n int) string { return strings.Repeat("h", n) }
	for _, target := range []string{"/api/v1/workers", "/api/v1/queues/" + marker + "%7B/pause"} {
		method := "GET"
		if strings.HasSuffix(target, "pause") {
			method = "POST"
		}
		many := func(k int) []string {
			out := []string{auth}
			for i := range k {
				out = append(out, fmt.Sprintf("X-H%d: %s", i, big(40)))
			}
			return out
		}
		for _, hs := range [][]string{
			{auth, "X-Big: " + big(60<<10)}, {auth, "X-Big: " + big(70<<10)}, {auth, "X-Big: " + big(200<<10)}, many(1000), many(2000),
			{auth, "Cookie: vigil_session=" + big(60<<10)}, {"Authorization: Bearer " + big(60<<10)}, {auth, "X Y: z"}, {auth, "NoColon"},
			{auth, "X-Null: a\x00b"}, {auth, " folded: x"}, {auth, "X-A: a", " continued"}, {auth, "Content-Length: 5", "Content-Length: 6"},
			{auth, "Content-Length: -1"}, {auth, "Content-Length: abc"}, {auth, "Transfer-Encoding: chunked", "Content-Length: 3"},
			{auth, "Transfer-Encoding: gzip"}, {auth, "Transfer-Encoding: chunked, chunked"}, {auth, "Content-Length: 10000000000"},
			{auth, "Host: a", "Host: b"}, {auth, "Expect: 100-continue"}, {auth, "Expect: zq9"}, {auth, "Content-Encoding: gzip"},
			{auth, "Connection: upgrade", "Upgrade: websocket"}, {auth, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"},
			{auth, "X-Forwarded-For: 127.0.0.1", "X-Real-IP: 127.0.0.1"}, {auth, "Range: bytes=0-1,2-3"}, {auth, "If-None-Match: " + big(1000)},
		} {
			r := rawReq{label: "headers", method: method, target: target, headers: hs}
			if slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, "Host:") }) {
				r.noHost = true
			}
			if slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, "Transfer-Encoding:") }) {
				r.body, r.noLen = []byte("0\r\n\r\n"), true // the last chunk
			}
			add(r)
		}
	}
	// Huge and lying bodies.
	for _, size := range []int{1<<20 + 1, 2 << 20, 10 << 20} {
		body := []byte(`{"type":"t","payload":"` + strings.Repeat("x", size) + `"}`)
		add(rawReq{label: "huge body", method: "POST", target: "/api/v1/queues/tag/jobs", headers: []string{auth, "Content-Type: application/json"}, body: body})
		add(rawReq{label: "huge body", method: "POST", target: "/api/v1/session", headers: []string{"Content-Type: application/json"}, body: body})
	}
	add(rawReq{label: "huge body", method: "POST", target: "/api/v1/queues/tag/jobs", headers: []string{auth, "Content-Type: application/json", "Transfer-Encoding: chunked"},
		body: []byte(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 3<<20, strings.Repeat("x", 3<<20))), noLen: true})
	add(rawReq{label: "huge body", method: "POST", target: "/api/v1/queues/tag/jobs", headers: []string{auth, "Content-Type: application/json", "Transfer-Encoding: chunked"},
		body: []byte("zz\r\nxx\r\n0\r\n\r\n"), noLen: true})
	// Auth: every mutation from the spec, with its parameters well formed,
	// refused for each way of not having the token.
	basic := base64.StdEncoding.EncodeToString([]byte(testToken))
	for _, op := range ops {
		if !op.write {
			continue
		}
		for _, hs := range [][]string{nil, {"Authorization:"}, {"Authorization: Bearer"}, {"Authorization: Bearer wrong"},
			{"Authorization: Basic " + basic}, {"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(":"+testToken))},
			{"Authorization: Token " + testToken}, {"Authorization: Bearer" + testToken}, {"Authorization: Bearer " + testToken + "x"},
			{"Authorization: Bearer x" + testToken}, {"Authorization: Bearer " + strings.ToUpper(testToken)},
			{"Authorization: Bearer " + testToken[:len(testToken)-1]}, {"Authorization: " + testToken},
			{auth, "Authorization: Bearer wrong"}, {"Authorization: Bearer wrong", auth}, {"Cookie: vigil_session=9999999999.00"},
			{"Cookie: vigil_session=" + testToken}, {"X-Authorization: Bearer " + testToken}, {"Proxy-Authorization: Bearer " + testToken}} {
			r := rawReq{label: "auth", method: op.method, target: fill(op.path, nil), headers: hs}
			if op.body {
				r.headers = append(slices.Clone(hs), "Content-Type: application/json")
				r.body = []byte(`{"type":"t","size":1}`)
			}
			add(r)
		}
		// The token in the query string is no token.
		add(rawReq{label: "auth", method: op.method, target: fill(op.path, nil) + "?token=" + testToken + "&access_token=" + testToken})
	}
	// Event stream: bad subscriptions and resume points.
	if _, ok := paths["/api/v1/events"]; ok {
		for _, tp := range eventsTopics {
			add(rawReq{label: "events", method: "GET", target: "/api/v1/events?topic=" + url.QueryEscape(tp), headers: []string{auth}})
		}
		add(rawReq{label: "events", method: "GET", target: "/api/v1/events?" + strings.Repeat("topic=a&", 65), headers: []string{auth}})
		for _, id := range lastEventIDs {
			add(rawReq{label: "events", method: "GET", target: "/api/v1/events?topic=" + marker, headers: []string{auth, "Last-Event-ID: " + id}})
			add(rawReq{label: "events", method: "GET", target: "/api/v1/events?topic=" + marker + "&last_event_id=" + url.QueryEscape(id), headers: []string{auth}})
		}
		add(rawReq{label: "events", method: "GET", target: "/api/v1/events", headers: []string{auth, "Last-Event-ID: 1-0", "Last-Event-ID: 2-0"}})
		add(rawReq{label: "events", method: "POST", target: "/api/v1/events", headers: []string{auth}})
	}
	// Request lines and framing that are not HTTP.
	for _, raw := range []string{"GET\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "GET /livez HTTP/2.0\r\nHost: x\r\n\r\n", "GET /livez HTTP/9.9\r\nHost: x\r\n\r\n",
		"GET /livez\r\n\r\n", "GET /livez HTTP/1.1 extra\r\nHost: x\r\n\r\n", "GET  /livez HTTP/1.1\r\nHost: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "\r\n\r\n\r\n", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "GET http://evil.example/livez HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://evil.example/api/v1/queues/" + marker + "{/pause HTTP/1.1\r\nHost: x\r\n\r\n", "CONNECT 127.0.0.1:6379 HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "GET /livez HTTP/1.1\nHost: x\n\n", "GET /livez HTTP/1.1\rHost: x\r\r",
		"GET /livez HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "GET /" + strings.Repeat("a", 2<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /api/v1/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
		"GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /api/v1/queues/" + marker + "{/pause HTTP/1.1\r\nHost: x\r\n\r\n",
		"\x00\x00\x00\x00\x00\x00", "get /livez http/1.1\r\nhost: x\r\n\r\n", "GET /livez HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X: y\r\n", 20000) + "\r\n",
	} {
		add(rawReq{label: "framing", raw: []byte(raw)})
	}
	for i := 0; len(out) < n; i++ {
		b := make([]byte, 1+rng.IntN(2000))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		add(rawReq{label: "framing", raw: b})
	}
	return out
}

// verdict says whether a result is acceptable for its request, and why not.
func verdict(r rawReq, res rawResult) string {
	switch {
	case res.err != nil:
		return "" // closed without an answer: counted, judged by the caller
	case res.status == http.StatusNotImplemented && slices.ContainsFunc(r.headers, func(h string) bool {
		return strings.HasPrefix(h, "Transfer-Encoding:") && h != "Transfer-Encoding: chunked"
	}):
		return "" // net/http, as RFC 9112 §6.1 asks for a transfer coding it does not know
	case res.status == http.StatusHTTPVersionNotSupported && r.raw != nil:
		return "" // net/http, for a version it does not speak (RFC 9110 §15.6.6)
	case res.status >= 500:
		return fmt.Sprintf("%d %.300s", res.status, res.body)
	case r.label == "auth" && res.status != http.StatusUnauthorized && res.status != http.StatusTooManyRequests:
		// 429: past FailedLoginBurst wrong tokens, the client is throttled.
		return fmt.Sprintf("%d, want 401 (or 429 once throttled): %.300s (headers %.300q)", res.status, res.body, r.headers)
	case res.status < 400 && slices.Contains([]string{"POST", "PUT", "DELETE", "PATCH"}, r.method):
		return fmt.Sprintf("accepted a malformed mutation: %d %.300s", res.status, res.body)
	case res.status >= 400 && r.raw == nil && r.method != "HEAD" && !strings.HasPrefix(r.target, "/docs/") &&
		res.ctype != "application/problem+json" && !isStdlibError(res):
		return fmt.Sprintf("%d with Content-Type %q", res.status, res.ctype)
	}
	return ""
}

// isStdlibError: net/http answers what it cannot parse itself, in plain
// text (or with no body: 417 for an Expect it does not know), before any
// handler runs. The Swagger UI's static files (/docs/) are not API
// routes: their 404 is plain text too.
func isStdlibError(res rawResult) bool {
	return (strings.HasPrefix(res.ctype, "text/plain") && (res.status == 400 || res.status == 431 || res.status == 414)) ||
		(res.status == http.StatusExpectationFailed && res.ctype == "")
}

// TestHostileRequests sends more than 10,000 malformed requests, generated
// from the served OpenAPI document, to a listening `vigil serve`: hostile
// path parameters (traversal, encodings, injection, limits), wrong
// methods, non-canonical targets, bad query parameters, invalid JSON under
// every content type, huge and broken headers, huge and lying bodies,
// every mutation without a valid token, bad event subscriptions and
// Last-Event-IDs, and bytes that are not HTTP. No answer is a 5xx (but for
// the two RFC-mandated ones net/http gives before any handler), no
// mutation is accepted, no panic is logged, every refusal is a problem
// detail, nothing in Redis changes, and MONITOR shows no command
// addressing a key outside Vigil's namespace.
func TestHostileRequests(t *testing.T) {
	need(t, modeShort)
	r := newRig(t, "tag", "other")
	spec := r.spec("h1", poolSpec{Queue: "tag", Workers: 1}, poolSpec{Queue: "other", Workers: 0})
	spec.SSEMaxClients = 1000
	h := startHost(t, spec)
	r.waitHealthy(slots("tag", 1), 30*time.Second)
	reqs := hostileRequests(specOps(t, h), 10_000)

	// The dump leaves out what a live host rewrites by itself: wait for a
	// second in which nothing else changes (start-up events settle), which
	// also shows the filter is complete.
	before := dump(t, r.redis.c)
	for settled, since := false, time.Now(); !settled; {
		if time.Since(since) > 30*time.Second {
			t.Fatalf("Redis keeps changing with no request at all (the dump's filter is incomplete): %v", diffDumps(before, dump(t, r.redis.c)))
		}
		<-time.After(time.Second) // wall time passing is the point here
		now := dump(t, r.redis.c)
		settled = len(diffDumps(before, now)) == 0
		before = now
	}
	mon := startMonitor(t, strings.TrimPrefix(r.redis.URL, "redis://"))

	type tallyKey struct {
		label  string
		status int
	}
	var mu sync.Mutex
	tallies := map[tallyKey]int{}
	var bad []string
	noAnswer := map[string]int{}
	begin := time.Now()
	var wg sync.WaitGroup
	const clients = 8
	for c := range clients {
		wg.Go(func() {
			cl := &rawClient{addr: strings.TrimPrefix(h.url, "http://")}
			defer cl.close()
			for i := c; i < len(reqs); i += clients {
				res := cl.do(reqs[i])
				v := verdict(reqs[i], res)
				mu.Lock()
				tallies[tallyKey{reqs[i].label, res.status}]++
				if res.err != nil {
					noAnswer[reqs[i].label]++
				}
				if v != "" && len(bad) < 50 {
					bad = append(bad, reqs[i].String()+" → "+v)
				} else if v != "" {
					bad = append(bad[:50], "…")
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	for _, b := range bad {
		t.Error(b)
	}
	// Connections the server closed without answering are for bytes that
	// are not a request, or bodies it stopped reading.
	for label, n := range noAnswer {
		if label != "framing" && label != "huge body" {
			t.Errorf("%d %s requests got no answer", n, label)
		}
	}
	h.must(http.MethodGet, "/livez", nil, http.StatusOK, nil)
	mon.stop()
	if d := diffDumps(before, dump(t, r.redis.c)); len(d) > 0 {
		t.Errorf("rejected requests changed Redis: %v", d)
	}

	// Every key any command addressed during the run.
	lines := mon.recorded()
	cmds := make([][]string, 0, len(lines))
	for _, l := range lines {
		if args := parseMonitor(l); len(args) > 0 {
			cmds = append(cmds, args)
		}
	}
	ns := namespace([]string{"tag", "other"}, []string{"h1"})
	outside, withMarker := 0, 0
	for i, keys := range keysOf(t, r.redis.c, cmds) {
		for _, k := range keys {
			if !ns.MatchString(k) {
				if outside++; outside <= 20 {
					t.Errorf("a command addressed a key outside Vigil's namespace: %q in %.300q", k, cmds[i])
				}
			}
			if strings.Contains(k, marker) {
				withMarker++
			}
		}
	}
	if len(cmds) < 100 {
		t.Errorf("MONITOR saw only %d commands", len(cmds))
	}
	statuses := map[int]int{}
	for k, n := range tallies {
		statuses[k.status] += n
	}
	result(t, "requests=%d in %s five_xx=0 accepted_mutations=0 panics=0 redis_changed=0 no_answer=%v statuses=%v redis_commands_seen=%d outside_namespace=%d keys_with_a_request_value=%d (task ids of a configured queue)",
		len(reqs), took.Round(time.Millisecond), noAnswer, statuses, len(cmds), outside, withMarker)
}
