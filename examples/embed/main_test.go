package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEmbedFromAnotherModule builds this example as a module of its own
// (a temporary directory whose go.mod replaces Vigil by this checkout):
// it compiles only if it imports nothing internal. It runs it, with its
// workers (the same binary in worker mode), and checks the program's own
// page, and under /admin/ the dashboard, Swagger UI, the spec, the API,
// the metrics on the program's registry; then SIGTERM stops it cleanly.
func TestEmbedFromAnotherModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	// Vigil's own requirements too (as `go mod tidy` would list them): the
	// module graph is then pruned as Vigil's, and complete in the cache.
	vmod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	requires := regexp.MustCompile(`(?ms)^require \(.*?^\)`).FindAll(vmod, -1)
	gomod := "module example.com/embedder\n\ngo 1.26\n\nrequire github.com/vigil-dev/vigil v0.0.0\n\n" + string(bytes.Join(requires, []byte("\n\n"))) +
		"\n\nreplace github.com/vigil-dev/vigil => " + root + "\n"
	for name, data := range map[string][]byte{"main.go": src, "go.sum": sum, "go.mod": []byte(gomod)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "embedder")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	// The module cache and the Go module proxy, as for the checkout.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the example does not build as a module of its own: %v\n%s", err, out)
	}

	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cmd := exec.Command(bin, "-redis", "redis://"+m.Addr()+"/0", "-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "VIGIL_TOKEN=") // mutations only from this host
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var base string
	var logged []string
	addr := regexp.MustCompile(`app=http://(127\.0\.0\.1:[0-9]+)/`)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the program exited before serving: %v\n%s", <-exited, strings.Join(logged, "\n"))
			}
			logged = append(logged, l)
			if mm := addr.FindStringSubmatch(l); mm != nil {
				base = "http://" + mm[1]
			}
		case <-ctx.Done():
			t.Fatalf("the program never said where it serves:\n%s", strings.Join(logged, "\n"))
		}
	}
	go func() { // keep draining its log
		for range lines {
		}
	}()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]string{
		"/":                    "My program",
		"/admin/":              "<html",
		"/admin/docs":          `src="docs/init.js"`,
		"/admin/openapi.json":  `"url":"/admin/"`,
		"/admin/api/v1/queues": `"queue":"emails"`,
		"/admin/livez":         `"ok"`,
	} {
		if code, body := get(path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body does not contain %q: %.300s", path, code, want, body)
		}
	}
	// Its two workers (the program itself in worker mode) turn healthy.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get("/admin/api/v1/workers")
		var ws struct {
			Workers []struct {
				Status string `json:"status"`
			} `json:"workers"`
		}
		_ = json.Unmarshal([]byte(body), &ws)
		healthy := 0
		for _, w := range ws.Workers {
			if w.Status == "healthy" {
				healthy++
			}
		}
		if healthy == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers not healthy after 30 s: %s", body)
		}
		select { // polling the API: the supervisor starts them on its own
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	// A mutation from this host (loopback, no token configured).
	if resp, err := http.Post(base+"/admin/api/v1/queues/emails/pause", "application/json", nil); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("pause under /admin: %d", resp.StatusCode)
	}
	// One registry: the program's counter (one view of / above) beside Vigil's.
	if _, body := get("/admin/metrics"); !strings.Contains(body, "embed_page_views_total 1\n") || !strings.Contains(body, "vigil_build_info") {
		t.Errorf("/admin/metrics lacks the program's counter or Vigil's:\n%.2000s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the program did not exit cleanly on SIGTERM: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the program did not exit within 40 s of SIGTERM")
	}
}
