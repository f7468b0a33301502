//go:build e2e

package e2e

import (
	"context"
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

// startDemo builds vigil and runs `vigil demo` on a free loopback port
// with an admin token; it is stopped (SIGTERM) when the test ends.
func startDemo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "vigil")
	build := exec.Command("go", "build", "-o", bin, "../cmd/vigil")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vigil: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(t.ArtifactDir(), "vigil-demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "demo", "-listen", addr)
	cmd.Env = append(os.Environ(), "VIGIL_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("vigil demo exited with %v (log: %s)", err, logf.Name())
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("vigil demo did not stop within 20 s of SIGTERM")
		}
		logf.Close()
	})
	base := "http://" + addr
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vigil demo not ready within 30 s: %v", err)
		}
		<-tick.C
	}
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
	base := startDemo(t)
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
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(qrow+` button.pause`)),
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
