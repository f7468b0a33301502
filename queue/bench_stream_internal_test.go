package queue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// BenchmarkEventStreamCeiling (issue 14, item 5) measures how many jobs'
// events one Redis can take on the single stream every event goes to
// (vigil:events: on a Redis Cluster, one shard): the entries a no-op job
// writes (its processing and done events, as jobEvents writes them, the
// stream trimmed as in production), from 8 connections sending batches
// of 16 jobs per round trip (the group commit of workers). Reported per
// second of Redis's own CPU (INFO cpu), which is what saturates: on this
// 2-core machine the clients share the cores with the server, so the
// wall-clock rate says less than the CPU one.
func BenchmarkEventStreamCeiling(b *testing.B) {
	env := testredis.NewReal(b)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	cpu := func() float64 { return testredis.ServerCPU(b, env.Client) }
	const conns, batch = 8, 16
	jobs := max(b.N, conns*batch)
	var added0 int64
	if before, err := env.Client.XInfoStream(ctx, store.Keys().Events()).Result(); err == nil {
		added0 = before.EntriesAdded
	} else if !strings.Contains(err.Error(), "no such key") {
		b.Fatal(err)
	}
	var bytes atomic.Int64
	var next atomic.Int64
	c0, t0 := cpu(), time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for {
				first := next.Add(batch) - batch
				if first >= int64(jobs) {
					return
				}
				pipe := env.Client.Pipeline()
				now := time.Now()
				for i := first; i < min(first+batch, int64(jobs)); i++ {
					e := JobEvent{Queue: "default", ID: fmt.Sprintf("%08x-5c1e-4d6b-9a8e-%012x", i, i), Type: "demo:resize",
						State: StateProcessing, MaxRetry: 2, Component: "worker:default:3", PID: 412345}
					jobEvents(ctx, store, pipe, now, e)
					e.State, e.DurationMS = StateDone, 12
					jobEvents(ctx, store, pipe, now, e)
				}
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				for _, c := range cmds {
					if x, ok := c.(*redis.StringCmd); ok {
						for _, a := range x.Args() {
							if s, ok := a.(string); ok {
								bytes.Add(int64(len(s)))
							}
						}
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	el, used := time.Since(t0), cpu()-c0
	after, err := env.Client.XInfoStream(ctx, store.Keys().Events()).Result()
	if err != nil {
		b.Fatal(err)
	}
	entries := after.EntriesAdded - added0
	perJob := float64(entries) / float64(jobs)
	b.ReportMetric(perJob, "entries/job")
	b.ReportMetric(float64(bytes.Load())/float64(entries), "B/entry")
	b.ReportMetric(float64(entries)/used, "entries/redis-cpu-s")
	b.ReportMetric(float64(jobs)/used, "jobs/redis-cpu-s")
	b.ReportMetric(float64(jobs)/el.Seconds(), "jobs/s")
	b.Logf("%d jobs, %d stream entries (%.1f per job, %.0f B each as sent): %.0f jobs/s wall clock, Redis CPU %.2f s: one Redis core takes %.0f entries/s = %.0f jobs/s",
		jobs, entries, perJob, float64(bytes.Load())/float64(entries), float64(jobs)/el.Seconds(), used, float64(entries)/used, float64(jobs)/used)
}
