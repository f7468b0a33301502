package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// BenchmarkThroughput processes b.N no-op tasks with 8 handlers at once,
// through a bare asynq server and through RunWorker (the middleware, the
// dequeue hook and the heartbeater), and reports jobs/s. Run it against a
// real Redis:
//
//	VIGIL_TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench Throughput -benchtime 5000x ./queue/
func BenchmarkThroughput(b *testing.B) {
	const concurrency = 8
	for _, mode := range []string{"asynq", "vigil"} {
		b.Run(mode, func(b *testing.B) {
			e := newQEnv(b)
			c := asynq.NewClientFromRedisClient(e.Client)
			for range b.N {
				if _, err := c.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(e.q)); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			all := make(chan struct{})
			noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				if n.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			})
			b.ResetTimer()
			start := time.Now()
			switch mode {
			case "asynq":
				srv := asynq.NewServerFromRedisClient(e.Client, asynq.Config{Concurrency: concurrency,
					Queues: map[string]int{e.q: 1}, TaskCheckInterval: 10 * time.Millisecond, Logger: asynqQuiet{}})
				if err := srv.Start(noop); err != nil {
					b.Fatal(err)
				}
				defer srv.Shutdown()
			case "vigil":
				cfg := e.config(0)
				cfg.Env.Concurrency = concurrency
				cfg.TaskCheckInterval = 10 * time.Millisecond
				stop := e.runWorker(cfg, map[string]asynq.Handler{"noop": noop})
				defer func() {
					if err := stop(); err != nil {
						b.Error(err)
					}
				}()
			}
			select {
			case <-all:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d tasks in 5 minutes", n.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}
