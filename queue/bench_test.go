package queue_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// BenchmarkThroughput processes b.N no-op tasks with 8 handlers at once,
// through a bare asynq server and through RunWorker (the middleware, the
// dequeue hook and the heartbeater), and reports jobs/s, and the CPU each
// job cost this process (proc-cpu-us/job: the worker and asynq) and, on a
// real Redis, the server (redis-cpu-us/job): on a 2-core machine the two
// share the cores, so what a job costs in CPU is what bounds the rate.
// Run it against a real Redis:
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
			start, proc0, redis0 := time.Now(), procCPU(b), serverCPU(b, e)
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
			proc, redis := procCPU(b)-proc0, serverCPU(b, e)-redis0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
			b.ReportMetric(proc*1e6/float64(b.N), "proc-cpu-us/job")
			if e.Mini == nil {
				b.ReportMetric(redis*1e6/float64(b.N), "redis-cpu-us/job")
			}
		})
	}
}

// procCPU is the CPU this process has used so far, user and system, in
// seconds.
func procCPU(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// serverCPU is testredis.ServerCPU of e's Redis; 0 on miniredis (it runs
// in this process: its CPU is procCPU's).
func serverCPU(tb testing.TB, e *qenv) float64 {
	if e.Mini != nil {
		return 0
	}
	return testredis.ServerCPU(tb, e.Client)
}
