package failover_test

import (
	"bufio"
	"bytes"
	"encoding/json"
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

const testToken = "failover-token"

// hostConfig is one host's configuration file (JSON is YAML).
func hostConfig(id, redisURL string, ledgerEnv map[string]string) []byte {
	cfg := map[string]any{
		"redis": redisURL, "listen": "127.0.0.1:0", "host": id, "token": testToken,
		"lease":        "10s",
		"heartbeat":    map[string]any{"interval": "1s", "ttl": "10s", "start_timeout": "20s"},
		"stop_timeout": "5s", "log_format": "json", "log_level": "info",
		"durable_enqueue": map[string]any{"replicas": durable(), "timeout": "500ms"},
		"pools": []map[string]any{{"queue": queueName, "workers": 4, "concurrency": 2, "command": []string{workerBin},
			"env": ledgerEnv, "task_timeout": "1m"}},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// host is one `vigil serve` process.
type host struct {
	t    *testing.T
	id   string
	cmd  *exec.Cmd
	url  string
	http *http.Client
	done chan struct{}

	mu  sync.Mutex
	log bytes.Buffer
}

func startHost(t *testing.T, id, redisURL string, ledgerEnv map[string]string) *host {
	t.Helper()
	path := filepath.Join(t.TempDir(), id+".yaml")
	if err := os.WriteFile(path, hostConfig(id, redisURL, ledgerEnv), 0o600); err != nil {
		t.Fatal(err)
	}
	return startHostFile(t, id, path)
}

// startHostFile starts `vigil serve` with the configuration file at path.
func startHostFile(t *testing.T, id, path string) *host {
	t.Helper()
	h := &host{t: t, id: id, done: make(chan struct{}),
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	h.cmd = exec.Command(vigilBin, "serve", "--config", path)
	h.cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	h.cmd.Stderr = pw
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			h.mu.Lock()
			h.log.WriteString(line + "\n")
			h.mu.Unlock()
			if strings.Contains(line, `"msg":"admin server listening"`) {
				var rec struct{ URL string }
				if json.Unmarshal([]byte(line), &rec) == nil {
					select {
					case listening <- strings.TrimSuffix(rec.URL, "/"):
					default:
					}
				}
			}
		}
	}()
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = h.cmd.Wait()
		pw.Close()
		close(h.done)
	}()
	t.Cleanup(func() { h.stop(15 * time.Second) })
	select {
	case h.url = <-listening:
	case <-h.done:
		t.Fatalf("host %s exited at start:\n%s", id, h.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("host %s did not start:\n%s", id, h.logText())
	}
	return h
}

func (h *host) logText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.log.String()
}

// count is how many log lines hold s.
func (h *host) count(s string) int { return strings.Count(h.logText(), s) }

// stop sends SIGTERM and waits for the exit (SIGKILL after timeout).
func (h *host) stop(timeout time.Duration) {
	select {
	case <-h.done:
		return
	default:
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(timeout):
		h.t.Errorf("host %s did not stop within %s of SIGTERM", h.id, timeout)
		_ = h.cmd.Process.Kill()
		<-h.done
	}
	h.http.CloseIdleConnections()
}

func (h *host) do(method, path string, body any) (int, []byte, error) {
	code, _, b, err := h.doHeader(method, path, body)
	return code, b, err
}

func (h *host) doHeader(method, path string, body any) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.url+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := h.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, err
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VIGIL_") && !strings.HasPrefix(kv, "GOFLAGS=") {
			out = append(out, kv)
		}
	}
	return out
}
