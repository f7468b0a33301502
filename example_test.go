package vigil_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/alicebob/miniredis/v2"

	"github.com/vigil-dev/vigil"
)

// Example embeds Vigil in a program's own HTTP server: the settings file
// `vigil serve` reads, one host of the cluster started, and the admin
// server (dashboard, API, Swagger UI, events, metrics) under /admin/. The
// lines between "embed:begin" and "embed:end" are the README's embedding
// snippet (TestReadmeEmbeddingIsTheExample holds them equal).
func Example() {
	// The example's surroundings: an in-memory Redis named by
	// VIGIL_REDIS_URL, and testdata/vigil.yaml as ./vigil.yaml.
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	os.Setenv("VIGIL_REDIS_URL", "redis://"+m.Addr()+"/0")
	defer os.Unsetenv("VIGIL_REDIS_URL")
	wd, _ := os.Getwd()
	if err := os.Chdir("testdata"); err != nil {
		log.Fatal(err)
	}
	defer os.Chdir(wd)
	ctx := context.Background()

	// embed:begin
	settings, err := vigil.LoadSettings("vigil.yaml") // the file `vigil serve` reads, with VIGIL_* env applied
	if err != nil {
		log.Fatal(err)
	}
	v, err := vigil.New(vigil.Config{Settings: settings, BasePath: "/admin"})
	if err != nil {
		log.Fatal(err)
	}
	if err := v.Start(ctx); err != nil { // supervises the pools; the handler answers 503 until then
		log.Fatal(err)
	}
	defer v.Close(context.Background()) // stops the workers, releases this host's slots

	mux := http.NewServeMux()
	v.Mount(mux) // the admin server, dashboard and API under /admin/
	// embed:end

	srv := httptest.NewServer(mux) // in a program: http.ListenAndServe("127.0.0.1:8080", mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/livez")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output: 200 OK
}
