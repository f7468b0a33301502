package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
)

// scrape GETs the handler and parses the answer with Prometheus's text
// parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of family name whose labels
// include want, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestCountersAndRedisCollectors(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	now := time.Now()
	mine, theirs := health.ComponentID{Queue: "tag", Slot: 0}, health.ComponentID{Queue: "tag", Slot: 1}
	for _, c := range []health.Component{
		{ID: mine, Status: health.StatusHealthy, Host: "h1", PID: 10, StartedAt: now, UpdatedAt: now},
		{ID: theirs, Status: health.StatusFailed, Host: "h2", StartedAt: now, UpdatedAt: now},
	} {
		if _, err := store.Write(ctx, c, health.Write{NoCheck: true, NoEvent: true, Index: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.HSet(ctx, store.Keys().WorkerStats(mine), queue.StatHeartbeats, 7, queue.StatInflight, 3,
		queue.StatFailurePrefix+queue.CodeRetry, 2, queue.StatToxicJobs, 1).Err(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "embedder_requests_total", Help: "The host program's own."})
	reg.MustRegister(own)
	own.Add(5)
	m, err := metrics.New(metrics.Config{Registry: reg, Store: store, Host: "h1", Queues: []string{"tag"}, Version: "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	m.Crash("tag", "exit", 3)
	m.Restart("tag", "backoff")
	m.Failed("tag")
	m.Detected("exit", 2*time.Millisecond)
	m.Recovered("tag", "crash", 2)
	m.HostLost()

	fams := scrape(t, m.Handler())
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"embedder_requests_total", nil, 5},
		{"vigil_build_info", map[string]string{"version": "v9.9.9"}, 1},
		{"vigil_workers", map[string]string{"queue": "tag", "status": "healthy"}, 1},
		{"vigil_workers", map[string]string{"queue": "tag", "status": "failed"}, 0}, // h2's
		{"vigil_worker_heartbeats_total", map[string]string{"component": "worker:tag:0"}, 7},
		{"vigil_worker_inflight_jobs", map[string]string{"component": "worker:tag:0"}, 3},
		{"vigil_worker_retry_attempts_total", map[string]string{"component": "worker:tag:0", "code": "RETRY"}, 2},
		{"vigil_worker_retry_attempts_total", map[string]string{"component": "worker:tag:0", "code": "RETRIES_EXHAUSTED"}, 0},
		{"vigil_worker_toxic_jobs_total", map[string]string{"component": "worker:tag:0"}, 1},
		{"vigil_worker_crashes_total", map[string]string{"queue": "tag", "reason": "exit", "exit_code": "3"}, 1},
		{"vigil_worker_restarts_total", map[string]string{"queue": "tag", "reason": "backoff"}, 1},
		{"vigil_worker_failed_total", map[string]string{"queue": "tag"}, 1},
		{"vigil_crash_detection_seconds", map[string]string{"cause": "exit"}, 1},
		{"vigil_recovered_jobs_total", map[string]string{"queue": "tag", "reason": "crash"}, 2},
		{"vigil_hosts_lost_total", nil, 1},
		{"vigil_queue_jobs", map[string]string{"queue": "tag", "state": "pending"}, 0},
		{"vigil_queue_paused", map[string]string{"queue": "tag"}, 0},
		{"vigil_scrape_errors", map[string]string{"part": "workers"}, 0},
		{"vigil_scrape_errors", map[string]string{"part": "queues"}, 0},
		{"vigil_duplicate_skips_total", nil, float64(queue.DefaultMetrics.DuplicateSkips.Load())},
	}
	for _, c := range checks {
		got, ok := value(fams, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := value(fams, "vigil_worker_heartbeats_total", map[string]string{"component": "worker:tag:1"}); ok {
		t.Error("reports another host's worker")
	}
	// A second Vigil on the same registry is refused, not silently merged.
	if _, err := metrics.New(metrics.Config{Registry: reg}); err == nil {
		t.Error("registered twice on one registry")
	}
}

// The scrape says when Redis does not answer, and still serves the rest.
func TestScrapeWithRedisDown(t *testing.T) {
	env := testredis.New(t)
	if env.Mini == nil {
		t.Skip("stops the server: miniredis only")
	}
	store := health.NewStore(env.Client, env.Prefix, 0)
	m, err := metrics.New(metrics.Config{Store: store, Host: "h1", Queues: []string{"tag"}, ScrapeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.Crash("tag", "hang", -2)
	env.Mini.Close()
	fams := scrape(t, m.Handler())
	if v, ok := value(fams, "vigil_scrape_errors", map[string]string{"part": "workers"}); !ok || v != 1 {
		t.Errorf("vigil_scrape_errors{part=workers} = %v %v", v, ok)
	}
	if v, _ := value(fams, "vigil_worker_crashes_total", map[string]string{"reason": "hang", "exit_code": "-2"}); v != 1 {
		t.Errorf("crashes = %v", v)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("a new registry has no Go collector")
	}
}

func TestNilMetricsDoNothing(t *testing.T) {
	var m *metrics.Metrics
	m.Crash("q", "exit", 1)
	m.Restart("q", "operator")
	m.Failed("q")
	m.Detected("hang", time.Second)
	m.Recovered("q", "crash", 1)
	m.HostLost()
	m.SSEClient(1)
	m.SSEEvents(3)
	m.SSELagged()
	m.Alert("sent")
}

func TestScheduleMetrics(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.ScheduleFires("nightly", "enqueued", 1)
	m.ScheduleFires("nightly", "skipped", 14)
	m.ScheduleFires("nightly", "skipped", 0)
	m.ScheduleLag(3 * time.Millisecond)
	fams := scrape(t, m.Handler())
	if v, _ := value(fams, "vigil_schedule_fires_total", map[string]string{"schedule": "nightly", "result": "enqueued"}); v != 1 {
		t.Errorf("enqueued %v", v)
	}
	if v, _ := value(fams, "vigil_schedule_fires_total", map[string]string{"schedule": "nightly", "result": "skipped"}); v != 14 {
		t.Errorf("skipped %v", v)
	}
	if n, _ := value(fams, "vigil_schedule_lag_seconds", nil); n != 1 {
		t.Errorf("lag observations %v", n)
	}
	var nilM *metrics.Metrics
	nilM.ScheduleFires("x", "enqueued", 1)
	nilM.ScheduleLag(time.Second)
}
