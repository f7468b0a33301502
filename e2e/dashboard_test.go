//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const token = "e2e-token"

// chromium finds the browser: $VIGIL_CHROMIUM, else Debian's.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("VIGIL_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("no Chromium on this machine: the dashboard's browser test needs one (Debian: apt-get install -y chromium, or set VIGIL_CHROMIUM)")
	return ""
}

// demo is `vigil demo` on a loopback port, with an admin token.
type demo struct {
	t    *testing.T
	bin  string
	addr string
	cmd  *exec.Cmd
	logf *os.File
	runs int
}

// startDemo builds vigil and starts `vigil demo` on a free loopback port;
// it is stopped (SIGTERM) when the test ends.
func startDemo(t *testing.T) *demo {
	t.Helper()
	d := &demo{t: t, bin: filepath.Join(t.TempDir(), "vigil")}
	build := exec.Command("go", "build", "-o", d.bin, "../cmd/vigil")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vigil: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.addr = ln.Addr().String()
	ln.Close()
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *demo) base() string { return "http://" + d.addr }

// start runs the demo and waits until it is ready.
func (d *demo) start() {
	t := d.t
	t.Helper()
	d.runs++
	logf, err := os.Create(filepath.Join(t.ArtifactDir(), fmt.Sprintf("vigil-demo-%d.log", d.runs)))
	if err != nil {
		t.Fatal(err)
	}
	d.logf = logf
	d.cmd = exec.Command(d.bin, "demo", "-listen", d.addr)
	d.cmd.Env = append(os.Environ(), "VIGIL_TOKEN="+token)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(d.base() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vigil demo not ready within 30 s: %v", err)
		}
		<-tick.C
	}
}

// stop sends SIGTERM and waits for the demo to exit (safe twice).
func (d *demo) stop() {
	t := d.t
	if d.cmd == nil {
		return
	}
	cmd := d.cmd
	d.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("vigil demo exited with %v (log: %s)", err, d.logf.Name())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("vigil demo did not stop within 20 s of SIGTERM")
	}
	d.logf.Close()
}

// browser starts headless Chromium and records the page's console errors,
// exceptions and CSP violations (browser log entries of level error).
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1300),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// The first Run starts the browser, for as long as ctx lives.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		acancel()
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || (m.Type == chromedp.ConsoleError && !strings.Contains(m.Text, "401")) {
				mu.Lock()
				problems = append(problems, string(m.Type)+": "+m.Text+" ("+m.URL+")")
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		acancel()
		<-done
	})
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// TestDashboard drives the dashboard of `vigil demo`: the workers table
// fills, a worker killed with SIGKILL shows crashed and then healthy again
// without a reload, and pausing a queue from the page (token prompt, then
// the session cookie) shows it paused.
func TestDashboard(t *testing.T) {
	chromium(t)
	d := startDemo(t)
	base := d.base()
	ctx, problems := browser(t)
	pollString := func(what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)))
		if err != nil {
			shot(t, ctx, "failed.png")
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second))); err != nil {
			shot(t, ctx, "failed.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err != nil {
			t.Fatalf("evaluate: %v", err)
		}
	}

	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	poll("the workers table fills (17 demo workers)", `document.querySelectorAll('#workers tbody tr').length === 17`)
	poll("the connection is live", `document.querySelector('#conn').dataset.state === 'live'`)
	t.Logf("workers table filled %v after navigation", time.Since(start).Round(time.Millisecond))

	// Watch worker:tag:0's statuses as the page draws them.
	const row = `document.querySelector('#workers tr[data-component="worker:tag:0"]')`
	pidText := pollString("worker:tag:0 healthy with a pid", `(() => { const r = `+row+`; return r && r.dataset.status === 'healthy' && r.querySelector('td.pid').textContent })()`)
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatalf("pid %q: %v", pidText, err)
	}
	eval(`(() => {
		window.__seen = [];
		const note = () => { const r = ` + row + `; const s = r && r.dataset.status; if (s && window.__seen[window.__seen.length - 1] !== s) window.__seen.push(s); };
		new MutationObserver(note).observe(document.querySelector('#workers tbody'), {childList: true, subtree: true});
		note();
		return true;
	})()`)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker:tag:0 (pid %d): %v", pid, err)
	}
	poll("worker:tag:0 shows crashed", `window.__seen.includes('crashed')`)
	t.Logf("crashed shown %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	poll("worker:tag:0 healthy again", `window.__seen.lastIndexOf('healthy') > window.__seen.indexOf('crashed')`)
	newPID := pollString("a new pid", `(() => { const r = `+row+`; return r && r.dataset.status === 'healthy' && r.querySelector('td.pid').textContent })()`)
	if newPID == pidText {
		t.Errorf("worker:tag:0 still shows pid %s after its restart", newPID)
	}
	seen, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__seen`))
	t.Logf("worker:tag:0 went through %v; healthy again %v after SIGKILL (pid %d → %s)", seen, time.Since(killed).Round(time.Millisecond), pid, newPID)

	// Pause a queue from the page: the server has a token, so the page
	// asks for it, starts a session and retries.
	const qrow = `#queues tr[data-queue="tag"]`
	poll("the tag queue's row", `!!document.querySelector('`+qrow+` button.pause:not([disabled])')`)
	// The table is redrawn with each event, so click through the page
	// itself rather than through a node id that may be gone meanwhile.
	eval(`(() => { document.querySelector('` + qrow + ` button.pause').click(); return true; })()`)
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#login`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
	); err != nil {
		shot(t, ctx, "failed.png")
		t.Fatalf("pause through the token prompt: %v", err)
	}
	poll("the tag queue shows paused", `document.querySelector('`+qrow+` td.paused').textContent === 'paused'`)
	resp, err := http.Get(base + "/api/v1/queues/tag")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"paused":true`) {
		t.Errorf("GET /api/v1/queues/tag after the page paused it: %s", body)
	}
	poll("the event log shows the pause", `[...document.querySelectorAll('#log li')].some(li => li.textContent.includes('pause queue:tag'))`)
	shot(t, ctx, "dashboard.png")

	// The page reconnects by itself: restart the demo (a new embedded
	// Redis, so the page's Last-Event-ID is unknown there): the page
	// reconnects, gets reset and a fresh snapshot, and shows the new
	// workers without a reload.
	eval(`(() => { window.__conn = []; new MutationObserver(() => window.__conn.push(document.querySelector('#conn').dataset.state)).observe(document.querySelector('#conn'), {attributes: true}); return true; })()`)
	d.stop()
	poll("the page notices", `window.__conn.includes('reconnecting')`)
	restarted := time.Now()
	d.start()
	poll("the page is live again", `document.querySelector('#conn').dataset.state === 'live'`)
	poll("the event log shows the reset", `[...document.querySelectorAll('#log li')].some(li => li.textContent.startsWith(li.querySelector('.t').textContent + 'reset'))`)
	poll("the workers table shows the new demo's workers", `(() => { const r = `+row+`; return r && r.dataset.status === 'healthy' && r.querySelector('td.pid').textContent !== '`+newPID+`'; })()`)
	poll("the tag queue is no longer paused (new Redis)", `document.querySelector('`+qrow+` td.paused').textContent === 'running'`)
	t.Logf("the page showed the restarted demo %v after it was ready", time.Since(restarted).Round(time.Millisecond))
	if p := problems(); len(p) > 0 {
		t.Errorf("the page reported problems:\n%s", strings.Join(p, "\n"))
	}
}

// shot saves a PNG of the page in the test's artifact folder, and at
// $VIGIL_E2E_SCREENSHOT when set.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("save screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	if dst := os.Getenv("VIGIL_E2E_SCREENSHOT"); dst != "" && name == "dashboard.png" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Errorf("copy screenshot to %s: %v", dst, err)
		}
	}
}
