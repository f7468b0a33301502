package schedule_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/schedule"
)

// lagRecorder is a schedule.Metrics that keeps every lag.
type lagRecorder struct {
	mu   sync.Mutex
	lags []time.Duration
	got  chan struct{}
}

func (l *lagRecorder) ScheduleFires(string, string, int) {}

func (l *lagRecorder) ScheduleLag(d time.Duration) {
	l.mu.Lock()
	l.lags = append(l.lags, d)
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
}

// BenchmarkScheduleLag measures the lag from a tick to its enqueue on the
// leader, with the real clock and the scheduler's own loop (timer, refresh,
// the fire script, its events): one tick every 200 ms, b.N ticks (at least
// 5). On miniredis by default, on a real Redis with VIGIL_TEST_REDIS_URL
// (make bench). Reports the lag's p50, p99 and max in ms.
func BenchmarkScheduleLag(b *testing.B) {
	r := testredis.New(b)
	hs := health.NewStore(r.Client, r.Prefix, 0)
	q := r.Prefix[:len(r.Prefix)-1] + "bench"
	settings := schedule.Settings{AllowSubsecond: true}
	st := schedule.NewStore(hs, schedule.StoreConfig{Queues: []string{q}, Settings: settings})
	if _, err := st.Create(b.Context(), schedule.Definition{Name: "lag", Spec: "@every 200ms", Queue: q, Type: "bench", Retention: 0}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		keys, _ := r.Client.Keys(b.Context(), "asynq:{"+q+"}:*").Result()
		if len(keys) > 0 {
			r.Client.Del(b.Context(), keys...)
		}
		r.Client.SRem(b.Context(), "asynq:queues", q)
		r.Client.ZRem(b.Context(), "asynq:schedulers", "asynq:schedulers:{"+r.Prefix+"scheduler}")
		r.Client.Del(b.Context(), "asynq:schedulers:{"+r.Prefix+"scheduler}", "asynq:scheduler_history:"+r.Prefix+"lag")
	})
	n := max(b.N, 5)
	rec := &lagRecorder{got: make(chan struct{}, 1)}
	s := schedule.New(hs, schedule.Config{Settings: settings, Metrics: rec, Host: "bench"})
	s.Leading(true, time.Now().Add(time.Hour))
	b.ResetTimer()
	s.Start()
	deadline := time.After(time.Duration(n)*200*time.Millisecond + 30*time.Second)
	for {
		rec.mu.Lock()
		got := len(rec.lags)
		rec.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-rec.got:
		case <-deadline:
			b.Fatalf("%d ticks fired of %d", got, n)
		}
	}
	s.Stop()
	b.StopTimer()
	rec.mu.Lock()
	lags := slices.Clone(rec.lags[:n])
	rec.mu.Unlock()
	slices.Sort(lags)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lags[len(lags)/2]), "lag-p50-ms")
	b.ReportMetric(ms(lags[min(len(lags)-1, len(lags)*99/100)]), "lag-p99-ms")
	b.ReportMetric(ms(lags[len(lags)-1]), "lag-max-ms")
	b.ReportMetric(0, "ns/op")
}
