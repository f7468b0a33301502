package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// scrape GETs /metrics and parses it with Prometheus's text parser.
func (e *e2e) scrape() map[string]*dto.MetricFamily {
	e.tb.Helper()
	resp, err := http.Get(e.base + "/metrics")
	if err != nil {
		e.tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.tb.Fatalf("GET /metrics: %s %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.tb.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sum adds the values of family name's series whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	total := 0.0
	f := fams[name]
	if f == nil {
		return 0
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
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// waitMetric waits until ok holds for a scrape, waking on each event.
func (e *e2e) waitMetric(what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	e.tb.Helper()
	r := e.events("$")
	deadline := time.Now().Add(e2eTimeout)
	for {
		fams := e.scrape()
		if ok(fams) {
			return fams
		}
		if time.Now().After(deadline) {
			e.tb.Fatalf("metrics never showed %s", what)
		}
		r.next(250 * time.Millisecond)
	}
}

// Metrics change as they should after a crash, a restart and a toxic job.
func TestMetricsAfterCrashRestartAndToxicJob(t *testing.T) {
	e := startServe(t, e2eConfig(t, "", 2))
	e.waitHealthy()
	tag := map[string]string{"queue": "tag"}
	before := e.scrape()
	for _, name := range []string{"vigil_build_info", "vigil_workers", "go_goroutines", "vigil_queue_jobs"} {
		if _, ok := before[name]; !ok {
			t.Fatalf("/metrics has no %s", name)
		}
	}
	if v := sum(before, "vigil_workers", map[string]string{"queue": "tag", "status": "healthy"}); v != 2 {
		t.Fatalf("vigil_workers{healthy} = %v, want 2", v)
	}

	// A job that kills its worker (exit 3) once.
	r := e.events("$")
	r.waitJob(e.enqueue("demo:crash", 100), queue.StateDone)
	e.waitHealthy()
	// At least: a worker starved past its TTL on a loaded machine is a
	// hang, restarted too; the crash counted below is the job's (exit 3).
	after := e.waitMetric("the crash's restart", func(f map[string]*dto.MetricFamily) bool {
		return sum(f, "vigil_worker_restarts_total", map[string]string{"queue": "tag", "reason": "backoff"}) >= 1
	})
	checks := []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"vigil_worker_crashes_total", map[string]string{"queue": "tag", "reason": "exit", "exit_code": "3"}, 1},
		{"vigil_recovered_jobs_total", map[string]string{"queue": "tag", "reason": "crash"}, 1},
		{"vigil_crash_detection_seconds", map[string]string{"cause": "exit"}, 1},
		{"vigil_worker_failed_total", tag, 0},
	}
	for _, c := range checks {
		if d := sum(after, c.name, c.labels) - sum(before, c.name, c.labels); d != c.delta {
			t.Errorf("%s%v rose by %v, want %v", c.name, c.labels, d, c.delta)
		}
	}

	// An operator restart.
	e.do("POST", "/api/v1/workers/worker:tag:0/restart", nil, http.StatusOK, nil)
	e.waitHealthy()
	e.waitMetric("the operator restart", func(f map[string]*dto.MetricFamily) bool {
		return sum(f, "vigil_worker_restarts_total", map[string]string{"queue": "tag", "reason": "operator"}) == 1
	})

	// A toxic job: it kills job_crash_retries+1 workers, then is archived
	// without running; the worker that refuses it reports it.
	e.enqueue("demo:toxic", 0)
	final := e.waitMetric("the toxic job", func(f map[string]*dto.MetricFamily) bool {
		return sum(f, "vigil_worker_toxic_jobs_total", tag) == 1
	})
	exit3 := map[string]string{"queue": "tag", "reason": "exit", "exit_code": "3"}
	if d := sum(final, "vigil_worker_crashes_total", exit3) - sum(after, "vigil_worker_crashes_total", exit3); d != 3 {
		t.Errorf("the toxic job crashed workers %v times, want 3", d)
	}
	if v := sum(final, "vigil_worker_heartbeats_total", tag); v < 2 {
		t.Errorf("vigil_worker_heartbeats_total = %v", v)
	}
	if v := sum(final, "vigil_worker_jobs_done_total", tag); v < 1 {
		t.Errorf("vigil_worker_jobs_done_total = %v", v)
	}
}

// A worker that turns failed is POSTed to the webhook, and counted.
func TestAlertWebhookAndFailedMetric(t *testing.T) {
	got := make(chan health.Event, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev health.Event
		if json.NewDecoder(r.Body).Decode(&ev) == nil && r.Header.Get("X-Vigil-Alert") == "worker_failed" {
			got <- ev
		}
	}))
	defer hook.Close()
	cfg := e2eConfig(t, "", 1)
	cfg.Alerts.Webhook = hook.URL
	cfg.Policy.MaxInWindow = 2
	e := startServe(t, cfg)
	e.waitHealthy()
	e.enqueue("demo:toxic", 0) // kills its worker at every run: the second crash marks it failed
	select {
	case ev := <-got:
		if ev.Worker == nil || ev.Worker.Component != "worker:tag:0" || ev.Worker.Status != "failed" {
			t.Fatalf("alert %+v", ev)
		}
	case <-time.After(e2eTimeout):
		t.Fatal("no alert reached the webhook")
	}
	e.waitMetric("the failure and the alert", func(f map[string]*dto.MetricFamily) bool {
		return sum(f, "vigil_worker_failed_total", map[string]string{"queue": "tag"}) == 1 &&
			sum(f, "vigil_alerts_total", map[string]string{"result": "sent"}) == 1 &&
			sum(f, "vigil_workers", map[string]string{"queue": "tag", "status": "failed"}) == 1
	})
}
