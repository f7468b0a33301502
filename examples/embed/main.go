// Command embed is a program that already serves HTTP with its own
// http.ServeMux and adds Vigil to it with one call: a pool of workers (this
// same binary, started again in worker mode) and Vigil's admin server
// (API, dashboard, Swagger UI, events, metrics) mounted under /admin/.
// It imports only public packages.
//
//	go run ./examples/embed -redis redis://127.0.0.1:6379/0 [-token s3cret]
//
// Then open http://127.0.0.1:8081/admin/ (the dashboard), /admin/docs
// (Swagger UI) and http://127.0.0.1:8081/ (the program's own page).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	if os.Getenv(health.EnvComponent) != "" {
		err = runWorker(ctx) // started by Vigil's supervisor
	} else {
		err = run(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	redisURL := fs.String("redis", os.Getenv("VIGIL_REDIS_URL"), "Redis URL")
	listen := fs.String("listen", "127.0.0.1:8081", "address of the program's HTTP server")
	token := fs.String("token", os.Getenv("VIGIL_TOKEN"), "admin token (empty: mutations only from this host)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// One Prometheus registry for the program's metrics and Vigil's.
	reg := prometheus.NewRegistry()
	views := prometheus.NewCounter(prometheus.CounterOpts{Name: "embed_page_views_total", Help: "Views of the program's own page."})
	reg.MustRegister(views)

	settings := vigil.DefaultSettings() // or vigil.LoadSettings("vigil.yaml")
	settings.Redis, settings.Token = *redisURL, *token
	settings.Pools = []vigil.Pool{{Queue: "emails", Workers: 2, Command: []string{self}, Concurrency: 4,
		TaskTimeout: vigil.Duration(time.Minute)}}
	v, err := vigil.New(vigil.Config{Settings: settings, BasePath: "/admin", Registry: reg})
	if err != nil {
		return err
	}
	if err := v.Start(ctx); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		views.Inc()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<p>My program. <a href="admin/">Its workers</a>.</p>`)
	})
	v.Mount(mux) // /admin/: the prefix is Config.BasePath
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = v.Close(context.Background())
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		// Vigil first: it ends its event streams, then stops its workers.
		cctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
		defer cancel()
		_ = v.Close(cctx)
		_ = srv.Shutdown(cctx)
	}()
	slog.Info("serving", "app", "http://"+ln.Addr().String()+"/", "vigil", "http://"+ln.Addr().String()+"/admin/")
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runWorker is the worker mode: an asynq worker of the emails queue,
// heartbeating for the component the supervisor named.
func runWorker(ctx context.Context) error {
	cfg, err := queue.WorkerConfigFromEnv()
	if err != nil {
		return err
	}
	return queue.RunWorker(ctx, cfg, map[string]asynq.Handler{
		"email:send": asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			slog.Info("sending an email", "payload", string(t.Payload()))
			return nil
		}),
	})
}
