package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
)

// The admin server's timeouts (cmd/vigil/serve.go, server.BodyReadTimeout):
// what the floods below must be bounded by.
const (
	readHeaderTimeout = 10 * time.Second
	bodyReadTimeout   = 30 * time.Second
	// closeSlack is how late past a timeout a connection may be closed on a
	// loaded machine.
	closeSlack = 3 * time.Second
	// livezBound is the slowest /livez answer tolerated during a flood.
	livezBound = time.Second
)

// prober asks /livez on a new connection every 50 ms and keeps the
// latencies.
type prober struct {
	mu       sync.Mutex
	lat      []time.Duration
	failures []string
	changed  chan struct{} // closed and replaced after every probe
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startProber(t *testing.T, url string) *prober {
	t.Helper()
	p := &prober{stop: make(chan struct{}), changed: make(chan struct{})}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	p.wg.Go(func() {
		for {
			t0 := time.Now()
			res, err := c.Get(url + "/livez")
			d := time.Since(t0)
			p.mu.Lock()
			switch {
			case err != nil:
				p.failures = append(p.failures, err.Error())
			case res.StatusCode != http.StatusOK:
				p.failures = append(p.failures, res.Status)
			default:
				p.lat = append(p.lat, d)
			}
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
			if res != nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond): // probing period
			}
		}
	})
	t.Cleanup(func() { p.close() })
	return p
}

func (p *prober) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// mark returns the position from which since reports.
func (p *prober) mark() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lat), len(p.failures)
}

// await waits until n probes were made after a mark (or 10 s passed).
func (p *prober) await(l, f, n int) {
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		done, ch := len(p.lat)-l+len(p.failures)-f >= n, p.changed
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			return
		}
	}
}

// since checks the probes after a mark: none failed, none slower than
// livezBound; it returns how many there were, the 99th percentile and
// the slowest.
func (p *prober) since(t *testing.T, what string, l, f int) string {
	t.Helper()
	p.mu.Lock()
	lat, fails := slices.Clone(p.lat[l:]), slices.Clone(p.failures[f:])
	p.mu.Unlock()
	if len(fails) > 0 {
		t.Errorf("%s: %d /livez probes failed: %v", what, len(fails), fails[:min(5, len(fails))])
	}
	if len(lat) < 5 {
		t.Errorf("%s: only %d /livez probes answered", what, len(lat))
		return "no probes"
	}
	slices.Sort(lat)
	p99, worst := lat[len(lat)*99/100], lat[len(lat)-1]
	if worst > livezBound {
		t.Errorf("%s: /livez took %s (p99 %s)", what, worst, p99)
	}
	return fmt.Sprintf("%d probes p99=%s max=%s", len(lat), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
}

// closedWithin opens n connections to addr, has each send its prefix and
// then one byte of trickle every interval (never finishing its request),
// and returns how long after its start the server closed each (-1: still
// open at the deadline). Every goroutine ends by the deadline.
func closedWithin(addr string, n int, prefix, trickle string, interval, deadline time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out[i] = -1
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer conn.Close()
			start := time.Now()
			_ = conn.SetDeadline(start.Add(deadline))
			closed := make(chan time.Duration, 1)
			go func() { // the server closing shows as EOF (after whatever it answered)
				_, _ = io.Copy(io.Discard, conn)
				closed <- time.Since(start)
			}()
			if _, err := conn.Write([]byte(prefix)); err == nil {
				for k := 0; time.Since(start) < deadline && trickle != ""; k++ {
					select {
					case d := <-closed:
						out[i] = d
						return
					case <-time.After(interval): // the trickle's pace is the attack
					}
					if _, err := conn.Write([]byte{trickle[k%len(trickle)]}); err != nil {
						break
					}
				}
			}
			d := <-closed
			if d < deadline {
				out[i] = d
			}
		})
	}
	wg.Wait()
	return out
}

func checkClosed(t *testing.T, what string, got []time.Duration, bound time.Duration) string {
	t.Helper()
	worst, open := time.Duration(0), 0
	for _, d := range got {
		if d < 0 {
			open++
			continue
		}
		worst = max(worst, d)
	}
	if open > 0 || worst > bound {
		t.Errorf("%s: %d of %d connections still open, the slowest closed after %s (bound %s)", what, open, len(got), worst, bound)
	}
	return fmt.Sprintf("%d closed, the last after %s", len(got)-open, worst.Round(time.Millisecond))
}

// TestFloods: slowloris (headers and bodies trickled a byte at a time),
// floods of idle connections and of requests on the admin port, and on
// the event stream a flood past the client cap and clients that never
// read. Each is bounded by the server's timeouts and caps, and /livez
// answers within a second throughout.
func TestFloods(t *testing.T) {
	need(t, modeLong)
	r := newRig(t, "tag", "idle")
	spec := r.spec("h1", poolSpec{Queue: "tag", Workers: 1}, poolSpec{Queue: "idle", Workers: 0})
	spec.SSEMaxClients, spec.SSEMaxLag = 50, 100
	h := startHost(t, spec)
	addr := strings.TrimPrefix(h.url, "http://")
	r.waitHealthy(slots("tag", 1), 30*time.Second)
	probe := startProber(t, h.url)
	auth := "Authorization: Bearer " + testToken + "\r\n"
	var report []string

	t.Run("slowloris", func(t *testing.T) {
		l, f := probe.mark()
		var wg sync.WaitGroup
		var headers, events, bodies []time.Duration
		wg.Go(func() {
			headers = closedWithin(addr, 200, "GET /api/v1/workers HTTP/1.1\r\nHost: x\r\n", "X-a: b\r\n", 500*time.Millisecond, readHeaderTimeout+2*closeSlack)
		})
		wg.Go(func() {
			events = closedWithin(addr, 40, "GET /api/v1/events HTTP/1.1\r\nHost: x\r\n"+auth, "X-a: b\r\n", 500*time.Millisecond, readHeaderTimeout+2*closeSlack)
		})
		wg.Go(func() {
			bodies = closedWithin(addr, 20, "POST /api/v1/queues/tag/jobs HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
				`{"type":"t","payload":"`+strings.Repeat("x", 100), time.Second, bodyReadTimeout+2*closeSlack)
		})
		wg.Wait()
		report = append(report,
			"slow headers: "+checkClosed(t, "slow headers", headers, readHeaderTimeout+closeSlack),
			"slow headers on the event stream: "+checkClosed(t, "slow headers on /api/v1/events", events, readHeaderTimeout+closeSlack),
			"slow bodies: "+checkClosed(t, "slow bodies", bodies, bodyReadTimeout+closeSlack),
			"livez: "+probe.since(t, "slowloris", l, f))
	})

	t.Run("idle connections", func(t *testing.T) {
		l, f := probe.mark()
		got := closedWithin(addr, 2000, "", "", 0, readHeaderTimeout+2*closeSlack)
		report = append(report, "2000 idle connections: "+checkClosed(t, "idle connections", got, readHeaderTimeout+closeSlack),
			"livez: "+probe.since(t, "idle connections", l, f))
	})

	t.Run("requests", func(t *testing.T) {
		l, f := probe.mark()
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		end := time.Now().Add(5 * time.Second)
		for i := range 32 {
			wg.Go(func() {
				c := &rawClient{addr: addr}
				defer c.close()
				for k := 0; time.Now().Before(end); k++ {
					req := rawReq{method: "GET", target: "/api/v1/workers", headers: []string{"Authorization: Bearer " + testToken}}
					if (i+k)%2 == 1 {
						req = rawReq{method: "POST", target: "/api/v1/queues/" + marker + "%7B/pause", headers: []string{"Authorization: Bearer " + testToken}}
					}
					res := c.do(req)
					mu.Lock()
					codes[res.status]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		total := 0
		for code, n := range codes {
			total += n
			if code == 0 || code >= 500 {
				t.Errorf("%d requests answered %d", n, code)
			}
		}
		report = append(report, fmt.Sprintf("request flood: %d requests in 5 s from 32 clients %v", total, codes),
			"livez: "+probe.since(t, "request flood", l, f))
	})

	t.Run("event clients past the cap", func(t *testing.T) {
		l, f := probe.mark()
		open := func() (net.Conn, int) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = conn.Write([]byte("GET /api/v1/events?topic=worker:*:status HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				conn.Close()
				return nil, 0
			}
			return conn, res.StatusCode
		}
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for range spec.SSEMaxClients {
			c, code := open()
			if code != http.StatusOK {
				t.Fatalf("event client within the cap: %d", code)
			}
			held = append(held, c)
		}
		over := map[int]int{}
		for range 200 {
			c, code := open()
			over[code]++
			if c != nil {
				c.Close()
			}
		}
		if over[http.StatusServiceUnavailable] != 200 {
			t.Errorf("200 event clients past the cap of %d: %v, want 503 for each", spec.SSEMaxClients, over)
		}
		probe.await(l, f, 10) // /livez, with every place taken
		for _, c := range held {
			c.Close()
		}
		held = nil
		// The places come back once the server notices the clients gone.
		var code int
		if !r.events.wait(10*time.Second, 100*time.Millisecond, func() bool {
			var c net.Conn
			if c, code = open(); c != nil {
				c.Close()
			}
			return code == http.StatusOK
		}) {
			t.Errorf("no place for a new event client after the others left: %d", code)
		}
		report = append(report, fmt.Sprintf("event clients: %d held, 200 more answered %v", spec.SSEMaxClients, over),
			"livez: "+probe.since(t, "event clients past the cap", l, f))
	})

	t.Run("event clients that never read", func(t *testing.T) {
		l, f := probe.mark()
		var stuck []net.Conn
		defer func() {
			for _, c := range stuck {
				c.Close()
			}
		}()
		dial := func() net.Conn {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.(*net.TCPConn).SetReadBuffer(4096)
			_, _ = conn.Write([]byte("GET /api/v1/events HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"))
			return conn
		}
		for range 10 {
			stuck = append(stuck, dial())
		}
		// A client that reads, as EventSource does: when it is dropped for
		// falling behind, it comes back with Last-Event-ID. It must see the
		// burst through.
		last := marker + "-last"
		got := make(chan struct{})
		quit := make(chan struct{})
		var rwg sync.WaitGroup
		reconnects := 0
		defer func() { close(quit); rwg.Wait() }()
		rwg.Go(func() {
			lastID := ""
			for {
				select {
				case <-quit:
					return
				default:
				}
				conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return
				}
				go func() { <-quit; conn.Close() }()
				hdr := ""
				if lastID != "" {
					hdr = "Last-Event-ID: " + lastID + "\r\n"
				}
				_, _ = conn.Write([]byte("GET /api/v1/events HTTP/1.1\r\nHost: x\r\n" + auth + hdr + "\r\n"))
				sc := bufio.NewScanner(conn)
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				for sc.Scan() {
					line := sc.Text()
					if id, ok := strings.CutPrefix(line, "id: "); ok {
						lastID = id
					}
					if strings.Contains(line, last) {
						close(got)
						conn.Close()
						return
					}
				}
				conn.Close()
				reconnects++
			}
		})
		// A burst: every enqueue is two events (one entry, on the job's
		// topic and also queue:jobs); nobody consumes the idle queue.
		begin := time.Now()
		idle := r.enqueue("idle", 5000, 1, 1)
		if _, err := r.client.Enqueue(context.Background(), "idle", asynq.NewTask("sleep", []byte("1")), asynq.TaskID(last)); err != nil {
			t.Fatal(err)
		}
		burst := time.Since(begin)
		select {
		case <-got:
		case <-time.After(60 * time.Second):
			t.Errorf("the reading client did not see the end of a burst of %d events within 60 s", 2*len(idle)+2)
		}
		seen := time.Since(begin)
		// Then more than the socket buffers of a client that never reads
		// hold (4 MB here): events of half a KB, written straight to the
		// stream, 1,000 at a time. A client is dropped once more than
		// max_lag entries came after the one it is stuck at (the broker
		// judges lag as entries arrive), so events go on until every stuck
		// client is dropped, or 100,000 of them have not done it. Their
		// drops are read from the server's log by address: reading them
		// would let them catch up.
		pad := strings.Repeat("p", 400)
		dropped := map[int]bool{}
		written := 0
		for ; written < 100_000 && len(dropped) < len(stuck); written += 1000 {
			pipe := r.redis.c.Pipeline()
			for range 1000 {
				r.store.AddEventTo(context.Background(), pipe, health.Event{Topic: "host:h1:status", Type: health.EventAction,
					Timestamp: time.Now().UnixMilli(), Action: &health.ActionView{Action: "flood", Target: "h1", Result: pad}})
			}
			if _, err := pipe.Exec(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i, c := range stuck {
				remote := `"remote":"` + c.LocalAddr().String() + `"`
				// Dropped while catching up (fell behind), or joined and
				// then stalled (does not read): which one depends on
				// whether its socket filled before it joined.
				if line := h.log.grep(remote, 1); !dropped[i] && (strings.Contains(line, "fell behind") || strings.Contains(line, "does not read")) {
					dropped[i] = true
				}
			}
		}
		// A client that joined and then stalled is dropped by the
		// watchdog, two looks 2 s apart, however many events come: the
		// broker's reader waits meanwhile for the stream it holds up, and
		// 100,000 events may be written before (9 of 10, then 8, 5, in
		// runs where the last stalled just before the end).
		deadline := time.Now().Add(3*2*time.Second + 4*time.Second)
		for i, c := range stuck {
			if !dropped[i] {
				_, dropped[i] = h.log.waitOrExit(0, time.Until(deadline), h.done, `"remote":"`+c.LocalAddr().String()+`"`, "events: disconnecting a client")
			}
		}
		n := 0
		for _, d := range dropped {
			if d {
				n++
			}
		}
		if n != len(stuck) {
			t.Errorf("%d of %d event clients that never read were disconnected after %d more events and the watchdog's time", n, len(stuck), written)
		}
		// Their places are free again (our ends of their connections are
		// still open): every place of the cap can be taken.
		freed := 0
		var again []net.Conn
		for range spec.SSEMaxClients {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			again = append(again, c)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write([]byte("GET /api/v1/events?topic=worker:*:status HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"))
			if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && res.StatusCode == http.StatusOK {
				freed++
			}
		}
		for _, c := range again {
			c.Close()
		}
		if freed != spec.SSEMaxClients {
			t.Errorf("after the drops, %d of the %d places of the cap could be taken", freed, spec.SSEMaxClients)
		}
		closed := n
		report = append(report, fmt.Sprintf("event clients that never read: %d of %d disconnected (max_lag %d) within %d events of half a KB; a burst of %d events in %s, seen through by a reading client after %s (%d resumes with Last-Event-ID)",
			closed, len(stuck), spec.SSEMaxLag, written, 2*len(idle)+2, burst.Round(time.Millisecond), seen.Round(time.Millisecond), reconnects),
			"livez: "+probe.since(t, "event clients that never read", l, f))
	})
	probe.close()
	h.must(http.MethodGet, "/livez", nil, http.StatusOK, nil)
	result(t, "%s", strings.Join(report, "; "))
}
