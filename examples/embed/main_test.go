package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAdminUnderPrefix: the program's own route and Vigil's, side by side.
func TestAdminUnderPrefix(t *testing.T) {
	env := testredis.New(t)
	app, admin, err := newApp(health.NewStore(env.Client, env.Prefix, 0), nil, "")
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
}
