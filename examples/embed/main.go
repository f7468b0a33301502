// Command embed is a program that already serves HTTP with its own
// http.ServeMux and adds Vigil to it: a supervisor running a pool of
// workers (this same binary, started again in worker mode) and Vigil's
// admin server mounted under /admin/.
//
//	go run ./examples/embed            # in-memory Redis
//	go run ./examples/embed -redis redis://127.0.0.1:6379/0 -token s3cret
//
// Then open http://127.0.0.1:8081/admin/docs (Swagger UI) and
// http://127.0.0.1:8081/ (the program's own page). Mounting under a prefix
// takes two things: http.StripPrefix, and server.Config.BasePath set to the
// same prefix, so that the served spec's servers entry and the session
// cookie's path point under it. Swagger UI's page uses relative URLs and
// works under any prefix.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/server"
	"github.com/vigil-dev/vigil/supervisor"
)

// queueName is the example pool's queue.
const queueName = "emails"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	if os.Getenv(health.EnvComponent) != "" {
		err = runWorker(ctx) // started by the supervisor below
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
	redisURL := fs.String("redis", "", "Redis URL (empty: an in-memory Redis)")
	listen := fs.String("listen", "127.0.0.1:8081", "address of the program's HTTP server")
	token := fs.String("token", os.Getenv("VIGIL_TOKEN"), "admin token (empty: mutations only from this host)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.Default()
	if *redisURL == "" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
		defer m.Close()
		*redisURL = "redis://" + m.Addr()
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	store := health.NewStore(rdb, "", 0)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	// One Prometheus registry for the program's metrics and Vigil's: the
	// admin server's /admin/metrics serves both.
	reg := prometheus.NewRegistry()
	views := prometheus.NewCounter(prometheus.CounterOpts{Name: "embed_page_views_total", Help: "Views of the program's own page."})
	reg.MustRegister(views)
	vm, err := metrics.New(metrics.Config{Registry: reg, Store: store, Host: host, Queues: []string{queueName}})
	if err != nil {
		return err
	}
	sup, err := supervisor.New(supervisor.Config{
		Host:     host,
		RedisURL: *redisURL,
		Pools:    []supervisor.Pool{{Queue: queueName, Workers: 2, Command: []string{self}}},
		Metrics:  vm,
		Logger:   log,
	}, store)
	if err != nil {
		return err
	}
	if err := sup.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = sup.Stop(context.Background()) }()

	app, admin, err := newApp(store, sup, *token, vm, views)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		// Event streams never end by themselves: close them first.
		_ = admin.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving", "app", "http://"+*listen+"/", "vigil", "http://"+*listen+"/admin/docs")
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newApp is the program's own mux with Vigil's admin server under /admin/
// (its metrics, on the program's registry, at /admin/metrics); close the
// admin server before shutting the HTTP server down.
func newApp(store *health.Store, sup server.Supervisor, token string, vm *metrics.Metrics, views prometheus.Counter) (http.Handler, *server.Server, error) {
	admin, err := server.New(server.Config{
		Store: store, Supervisor: sup, Queues: []string{queueName}, Token: token,
		BasePath: "/admin", // the prefix StripPrefix removes
		Metrics:  vm,
	})
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		views.Inc()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<p>My program. Its workers: <a href="admin/docs">Vigil admin API</a>.</p>`)
	})
	mux.Handle("/admin/", http.StripPrefix("/admin", admin))
	return mux, admin, nil
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
