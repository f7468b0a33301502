package chaos_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testToken is the admin token of every host.
const testToken = "chaos-token"

// hostSpec is the configuration of one `vigil serve` (docs/design.md §10).
type hostSpec struct {
	ID                       string
	Redis                    string
	Pools                    []poolSpec
	Interval                 time.Duration // heartbeat
	TTL                      time.Duration
	StartTimeout             time.Duration
	Policy                   policySpec
	StopTimeout              time.Duration
	Lease                    time.Duration
	SSEMaxClients, SSEMaxLag int
}

type poolSpec struct {
	Queue       string
	Workers     int
	Concurrency int
	Command     []string // default: chaosworker
	Env         map[string]string
	TaskTimeout time.Duration
}

type policySpec struct {
	BackoffBase, BackoffMax, Window time.Duration
	MaxInWindow, MaxLifetime        int
	JobCrashRetries                 int
}

// noLimits raises the restart limits so that kills never turn a worker
// failed, with restarts after 10 ms.
var noLimits = policySpec{BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond,
	MaxInWindow: 1_000_000, MaxLifetime: 1_000_000}

// config renders the spec as the YAML file vigil reads (JSON is YAML).
func (s hostSpec) config() []byte {
	d := func(v, def time.Duration) string {
		if v == 0 {
			v = def
		}
		return v.String()
	}
	pol := map[string]any{"backoff_base": d(s.Policy.BackoffBase, time.Second), "backoff_max": d(s.Policy.BackoffMax, time.Minute),
		"window": d(s.Policy.Window, 5*time.Minute)}
	if s.Policy.MaxInWindow > 0 {
		pol["max_in_window"] = s.Policy.MaxInWindow
	}
	if s.Policy.MaxLifetime > 0 {
		pol["max_lifetime"] = s.Policy.MaxLifetime
	}
	if s.Policy.JobCrashRetries > 0 {
		pol["job_crash_retries"] = s.Policy.JobCrashRetries
	}
	var pools []map[string]any
	for _, p := range s.Pools {
		cmd := p.Command
		if cmd == nil {
			cmd = []string{workerBin}
		}
		pools = append(pools, map[string]any{"queue": p.Queue, "workers": p.Workers, "concurrency": max(p.Concurrency, 1),
			"command": cmd, "env": p.Env, "task_timeout": d(p.TaskTimeout, time.Minute)})
	}
	sse := map[string]any{}
	if s.SSEMaxClients > 0 {
		// All the tests' clients come from 127.0.0.1.
		sse["max_clients"], sse["max_clients_per_address"] = s.SSEMaxClients, s.SSEMaxClients
	}
	if s.SSEMaxLag > 0 {
		sse["max_lag"] = s.SSEMaxLag
	}
	cfg := map[string]any{
		"redis": s.Redis, "listen": "127.0.0.1:0", "host": s.ID, "token": testToken,
		"lease":     d(s.Lease, 3*time.Second),
		"heartbeat": map[string]any{"interval": d(s.Interval, 200*time.Millisecond), "ttl": d(s.TTL, 2*time.Second), "start_timeout": d(s.StartTimeout, 20*time.Second)},
		"policy":    pol, "stop_timeout": d(s.StopTimeout, 3*time.Second), "sse": sse,
		"log_format": "json", "log_level": "info", "pools": pools,
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// host is one `vigil serve` process.
type host struct {
	t     *testing.T
	spec  hostSpec
	cmd   *exec.Cmd
	log   *logSink
	url   string // http://127.0.0.1:<port>
	http  *http.Client
	done  chan struct{} // closed once the process has exited and been reaped
	state *os.ProcessState
}

// startHost starts `vigil serve` with spec and waits until its admin server
// listens. The test's cleanup stops it (SIGTERM, then SIGKILL) if it runs.
func startHost(t *testing.T, spec hostSpec) *host {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil-"+spec.ID+".yaml")
	if err := os.WriteFile(path, spec.config(), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, spec: spec, log: newLogSink(), done: make(chan struct{}),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
	h.cmd = exec.Command(vigilBin, "serve", "--config", path)
	h.cmd.Env = cleanEnv()
	h.cmd.Stderr = h.log
	mark := h.log.mark()
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start vigil serve: %v", err)
	}
	go func() {
		_ = h.cmd.Wait()
		h.state = h.cmd.ProcessState
		close(h.done)
	}()
	t.Cleanup(h.cleanup)
	line, ok := h.log.waitOrExit(mark, 60*time.Second, h.done, `"msg":"admin server listening"`)
	if !ok {
		t.Fatalf("host %s did not start (exit %v); its log:\n%s", spec.ID, h.state, h.log.tail(100))
	}
	var rec struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.URL == "" {
		t.Fatalf("host %s: cannot read its address from %q", spec.ID, line)
	}
	h.url = strings.TrimSuffix(rec.URL, "/")
	return h
}

// cleanEnv is this process's environment without VIGIL_* variables (the
// config file says everything) nor GOFLAGS.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VIGIL_") && !strings.HasPrefix(kv, "GOFLAGS=") {
			out = append(out, kv)
		}
	}
	return out
}

func (h *host) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the host process and reaps it.
func (h *host) kill() {
	h.t.Helper()
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.done
}

// term sends SIGTERM and waits up to timeout for the exit; it returns the
// exit code (-1 when it had to be killed).
func (h *host) term(timeout time.Duration) int {
	h.t.Helper()
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
		return h.state.ExitCode()
	case <-time.After(timeout):
		h.t.Errorf("host %s did not exit within %s of SIGTERM", h.spec.ID, timeout)
		h.kill()
		return -1
	}
}

func (h *host) cleanup() {
	if !h.exited() {
		h.term(h.spec.StopTimeout + 10*time.Second)
	}
	h.http.CloseIdleConnections()
	if dir := os.Getenv(envLogs); dir != "" {
		name := strings.NewReplacer("/", "_").Replace(h.t.Name()) + "-" + h.spec.ID + ".log"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(h.log.all()), 0o644); err != nil {
			h.t.Logf("keep the log: %v", err)
		}
	}
	if h.t.Failed() {
		h.t.Logf("host %s's log (last lines):\n%s", h.spec.ID, h.log.tail(150))
	}
	// A data race or a panic in vigil fails the test whatever it asserted.
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", `"msg":"panic in admin handler"`} {
		if n := h.log.count(bad); n > 0 {
			h.t.Errorf("host %s logged %q %d times; log:\n%s", h.spec.ID, bad, n, h.log.grep(bad, 20))
		}
	}
}

// call sends an API request with the token and returns the status and body.
func (h *host) call(method, path string, body any) (int, []byte) {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.url+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := h.http.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// must calls and fails the test unless the answer has status want; it
// decodes the body into out (if not nil).
func (h *host) must(method, path string, body any, want int, out any) {
	h.t.Helper()
	code, b := h.call(method, path, body)
	if code != want {
		h.t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// logSink collects a process's stderr line by line and lets a test wait for
// a line.
type logSink struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced on every line
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logSink) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// waitOrExit returns the first line from index from on that contains every
// part, waiting up to timeout, or until stop is closed.
func (l *logSink) waitOrExit(from int, timeout time.Duration, stop <-chan struct{}, parts ...string) (string, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		for ; from < len(l.lines); from++ {
			if containsAll(l.lines[from], parts) {
				line := l.lines[from]
				l.mu.Unlock()
				return line, true
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-stop:
			stop = nil // read what it wrote before exiting, then give up
			timer.Reset(100 * time.Millisecond)
		case <-timer.C:
			return "", false
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func (l *logSink) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func (l *logSink) grep(sub string, max int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, sub) && len(out) < max {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + "\n"
}

func (l *logSink) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.lines)-n)
	return fmt.Sprintf("[%d lines before]\n%s", from, strings.Join(l.lines[from:], "\n"))
}

// scanLines is bufio's line scanner with room for long lines.
func scanLines(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	return sc
}
