package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAdminUnderPrefix: the program's own route and Vigil's, side by side.
func TestAdminUnderPrefix(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	reg := prometheus.NewRegistry()
	views := prometheus.NewCounter(prometheus.CounterOpts{Name: "embed_page_views_total", Help: "Views."})
	reg.MustRegister(views)
	vm, err := metrics.New(metrics.Config{Registry: reg, Store: store, Host: "h1", Queues: []string{queueName}})
	if err != nil {
		t.Fatal(err)
	}
	app, admin, err := newApp(store, nil, "", vm, views)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	srv := httptest.NewServer(app)
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                     "My program",
		"/admin/docs":           `src="docs/init.js"`,
		"/admin/docs/init.js":   "openapi.json",
		"/admin/openapi.json":   `"url":"/admin/"`,
		"/admin/api/v1/workers": `"workers":[]`,
		"/admin/api/v1/queues":  `"queue":"emails"`,
		"/admin/livez":          `"ok"`,
		"/admin/metrics":        `vigil_queue_jobs{queue="emails",state="pending"} 0`,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(b.String(), want) {
			t.Errorf("%s: %d, body does not contain %q", path, resp.StatusCode, want)
		}
	}
	// One registry: the program's own counter (one view of / above) is
	// served beside Vigil's.
	resp, err := http.Get(srv.URL + "/admin/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(b.String(), "embed_page_views_total 1\n") || !strings.Contains(b.String(), "vigil_build_info") {
		t.Errorf("/admin/metrics lacks the program's counter or Vigil's:\n%s", b.String())
	}
}
