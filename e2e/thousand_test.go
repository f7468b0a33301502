//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/server"
)

// fleet is an admin server (in this process) whose Redis holds n workers
// over 10 queues and 20 hosts, with no supervisor: what the dashboard of a
// large cluster reads. Its Redis is a private redis-server when the binary
// is here (CI installs it), else, or with VIGIL_E2E_MINIREDIS=1, miniredis
// (which takes a second or two to read 1,000 workers: the figures are then
// mostly miniredis's).
type fleet struct {
	base    string
	redis   string
	workers []health.Component
	store   *health.Store
	ts      *httptest.Server
	// eventsDown makes GET /api/v1/events answer 503 (a page then
	// reconnects on its own, from its last event id).
	eventsDown atomic.Bool
	// taken are the connections the admin server took from net/http
	// (its HTTP/1.1 event streams), which ts does not track.
	mu    sync.Mutex
	taken []net.Conn
}

// cutClients closes every client connection, the event streams' too: the
// network drops them.
func (f *fleet) cutClients() {
	f.ts.CloseClientConnections()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.taken {
		_ = c.Close()
	}
	f.taken = nil
}

// fleetRedis returns a Redis of the test's own and what it is.
func fleetRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil && os.Getenv("VIGIL_E2E_MINIREDIS") == "" {
		srv := testredis.StartServer(tb)
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(srv.Port)})
		tb.Cleanup(func() { _ = c.Close() })
		return c, "redis-server"
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c, "miniredis"
}

func statusOf(i int) health.Status {
	switch {
	case i%97 == 0:
		return health.StatusFailed
	case i%31 == 0:
		return health.StatusCrashed
	case i%53 == 0:
		return health.StatusStopped
	case i%71 == 0:
		return health.StatusStarting
	}
	return health.StatusHealthy
}

func newFleet(tb testing.TB, n int) *fleet {
	tb.Helper()
	rdb, kind := fleetRedis(tb)
	store := health.NewStore(rdb, "", 0)
	f := &fleet{redis: kind, store: store}
	var queues []string
	for q := range 10 {
		queues = append(queues, fmt.Sprintf("q%02d", q))
	}
	ctx := context.Background()
	now := time.Now()
	for i := range n {
		c := health.Component{
			ID:     health.ComponentID{Queue: queues[i%10], Slot: i / 10},
			Status: statusOf(i), Host: fmt.Sprintf("h%02d", i%20), PID: 10000 + i,
			StartedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Minute), LastHeartbeat: now,
		}
		if c.Status == health.StatusCrashed || c.Status == health.StatusFailed {
			c.HasExit, c.ExitCode, c.Reason = true, 1, "exited with code 1"
			c.Restarts.RestartCount, c.Restarts.LifetimeRestarts = 2, 5
			c.Restarts.Crashes = []time.Time{now.Add(-2 * time.Minute), now.Add(-time.Minute)}
		}
		if _, err := store.Write(ctx, c, health.Write{NoCheck: true, NoEvent: true, Index: true, Restarts: true}); err != nil {
			tb.Fatalf("seed %s: %v", c.ID, err)
		}
		f.workers = append(f.workers, c)
	}
	srv, err := server.New(server.Config{
		Store: store, Queues: queues, Token: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// miniredis cannot unblock a stream read: keep Close quick.
		SSE: server.SSEConfig{ReadBlock: 100 * time.Millisecond},
	})
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.eventsDown.Load() && r.URL.Path == "/api/v1/events" {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	ts.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateHijacked {
			f.mu.Lock()
			f.taken = append(f.taken, c)
			f.mu.Unlock()
		}
	}
	ts.Start()
	tb.Cleanup(func() {
		_ = srv.Close()
		ts.Close()
	})
	f.base, f.ts = ts.URL, ts
	tb.Logf("a fleet of %d workers on %s in %v", n, kind, time.Since(now).Round(time.Millisecond))
	return f
}

// count is how many workers match.
func (f *fleet) count(match func(health.Component) bool) int {
	n := 0
	for _, c := range f.workers {
		if match(c) {
			n++
		}
	}
	return n
}

const rows = `document.querySelectorAll('#workers tbody tr').length`

// TestDashboardThousandWorkers: with 1,000 workers the workers view shows
// a page of 100, the count, and filters by status, queue and host from
// links (and from the URL when the page is loaded with one).
func TestDashboardThousandWorkers(t *testing.T) {
	chromium(t)
	f := newFleet(t, 1000)
	ctx, problems := browser(t)
	p := &page{t: t, ctx: ctx, base: f.base}
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/#/workers")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.poll("1,000 workers, a page of 100", `document.querySelector('#worker-count').textContent.startsWith('1000') && `+rows+` === 100 && document.querySelector('#workers-pager').textContent.includes('1–100 of 1000')`)

	t.Logf("1,000 workers shown %v after navigation", time.Since(start).Round(time.Millisecond))
	failed := f.count(func(c health.Component) bool { return c.Status == health.StatusFailed })
	p.view("#/workers?status=failed")
	p.poll(fmt.Sprintf("the status filter: %d failed", failed), fmt.Sprintf(`%s === %d && [...document.querySelectorAll('#workers tbody tr')].every(r => r.dataset.status === 'failed')`, rows, failed))

	both := f.count(func(c health.Component) bool { return c.ID.Queue == "q03" && c.Host == "h03" })
	p.view("#/workers?queue=q03&host=h03")
	p.poll(fmt.Sprintf("queue and host filters: %d workers", both), fmt.Sprintf(`%s === %d && document.querySelector('#worker-filter select[name=host]').value === 'h03'`, rows, both))

	// The last page, loaded from its URL.
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/#/workers?page=10&queue=q09")); err != nil {
		t.Fatal(err)
	}
	p.poll("a filtered list from the URL (page 10 of 1 is its page 1)", rows+` === 100 && document.querySelector('#workers-pager').textContent.includes('1–100 of 100') && document.querySelector('#worker-filter select[name=queue]').value === 'q09'`)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/#/workers?page=10")); err != nil {
		t.Fatal(err)
	}
	p.poll("page 10 from the URL", rows+` === 100 && document.querySelector('#workers-pager').textContent.includes('901–1000 of 1000')`)
	last := `document.querySelector('#workers tbody tr:last-child').dataset.component`
	p.poll("the last worker, by queue then slot", last+` === 'worker:q09:99'`)
	p.click("open a worker", `#workers tbody tr:last-child td.id a`)
	p.poll("its detail", `document.querySelector('#worker-title').textContent === 'worker:q09:99' && document.querySelector('#worker-record [data-field="host"]').textContent === 'h19'`)
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page reported problems:\n%s", strings.Join(pr, "\n"))
	}
}

// BenchmarkDashboard1000Workers loads the workers view of a cluster of
// 1,000 workers in a fresh Chromium (cold cache) per iteration and reports
// the time to first contentful paint, the time until the 1,000 workers are
// counted and a page of them shown, and the bytes of the page's assets
// (HTML, scripts, stylesheets) as sent (gzip) and unpacked, and of its
// API reads. Also the bytes of the event stream's snapshot of them.
//
//	go test -tags e2e -run '^$' -bench Dashboard1000 -benchtime 5x ./e2e/
func BenchmarkDashboard1000Workers(b *testing.B) {
	chromium(b)
	f := newFleet(b, 1000)
	snapshot := snapshotBytes(b, f.base)
	var fcp, start, event, shown, assets, assetsRaw, api float64
	for b.Loop() {
		m := loadOnce(b, f.base+"/#/workers")
		fcp += m["fcp"]
		start += m["start"]
		event += m["event"]
		shown += m["shown"]
		assets += m["assets"]
		assetsRaw += m["assetsRaw"]
		api += m["api"]
	}
	n := float64(b.N)
	b.ReportMetric(float64(snapshot), "snapshot-bytes")
	b.ReportMetric(fcp/n, "ms-first-paint")
	b.ReportMetric(start/n, "ms-script-start")
	b.ReportMetric(event/n, "ms-first-event")
	b.ReportMetric(shown/n, "ms-1000-shown")
	b.ReportMetric(assets/n, "asset-bytes")
	b.ReportMetric(assetsRaw/n, "asset-bytes-unzipped")
	b.ReportMetric(api/n, "api-bytes")
}

// loadOnce opens url in a new browser and measures it (see the benchmark).
func loadOnce(b *testing.B, url string) map[string]float64 {
	b.Helper()
	ctx, problems := browser(b)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.Fatal(err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Poll[float64](`document.querySelector('#worker-count').textContent.startsWith('1000') && `+rows+` === 100 && performance.now()`,
		chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		b.Fatalf("the workers view: %v", err)
	}
	m, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
		const fcp = performance.getEntriesByName('first-contentful-paint')[0];
		const nav = performance.getEntriesByType('navigation')[0];
		const mark = (n) => { const e = performance.getEntriesByName(n)[0]; return e ? e.startTime : -1; };
		const m = {fcp: fcp ? fcp.startTime : -1, start: mark('vigil-start'), event: mark('vigil-first-event'), assets: nav.transferSize, assetsRaw: nav.decodedBodySize, api: 0};
		for (const r of performance.getEntriesByType('resource')) {
			if (r.name.includes('/api/')) m.api += r.decodedBodySize;
			else if (/\.(js|css)$/.test(new URL(r.name).pathname)) { m.assets += r.transferSize; m.assetsRaw += r.decodedBodySize; }
		}
		return m;
	})()`))
	if err != nil {
		b.Fatal(err)
	}
	m["shown"] = shown
	if pr := problems(); len(pr) > 0 {
		b.Errorf("the page reported problems:\n%s", strings.Join(pr, "\n"))
	}
	closeBrowser(ctx)
	return m
}

// snapshotBytes reads the event stream with the page's topics until the
// snapshot of every worker has come, and returns its size.
func snapshotBytes(tb testing.TB, base string) int {
	tb.Helper()
	q := url.Values{}
	for _, t := range []string{"system:health", "host:*:status", "queue:status", "queue:*:status", "worker:*:status", "queue:jobs"} {
		q.Add("topic", t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events?"+q.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, workers := 0, 0
	for sc.Scan() {
		n += len(sc.Bytes()) + 1
		if strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), `"topic":"worker:`) {
			if workers++; workers == 1000 {
				return n
			}
		}
	}
	tb.Fatalf("the snapshot ended after %d workers: %v", workers, sc.Err())
	return 0
}
