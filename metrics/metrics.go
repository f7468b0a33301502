package metrics

import (
	"cmp"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// ScrapeTimeoutDefault bounds the Redis reads of one scrape.
const ScrapeTimeoutDefault = 2 * time.Second

// Registry is where the collectors are registered and what Handler serves:
// a *prometheus.Registry does.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Config configures New.
type Config struct {
	// Registry receives Vigil's collectors; nil: a new one with Go's and
	// the process's collectors. An embedding program passes its own to
	// serve its metrics and Vigil's together.
	Registry Registry
	// Store is the health store; nil: no collector reads Redis.
	Store *health.Store
	// Host is this host's id: its components are reported.
	Host string
	// Queues are the configured pools' queues.
	Queues []string
	// Version is reported in vigil_build_info.
	Version string
	// ScrapeTimeout bounds the Redis reads of one scrape
	// (ScrapeTimeoutDefault).
	ScrapeTimeout time.Duration
	Logger        *slog.Logger
}

// Metrics are Vigil's collectors. Its methods are safe on a nil *Metrics
// (they do nothing), so that instrumented code needs no checks.
type Metrics struct {
	reg Registry

	crashes      *prometheus.CounterVec
	restarts     *prometheus.CounterVec
	failed       *prometheus.CounterVec
	detection    *prometheus.HistogramVec
	recovered    *prometheus.CounterVec
	hostsLost    prometheus.Counter
	redisFaults  *prometheus.CounterVec
	sseClients   prometheus.Gauge
	sseEvents    prometheus.Counter
	sseDropped   prometheus.Counter
	alertResults *prometheus.CounterVec
	truncated    *prometheus.CounterVec
	schedFires   *prometheus.CounterVec
	schedLag     prometheus.Histogram
	scratchDirs  prometheus.Counter
	scratchBytes prometheus.Counter
}

// Label is one value of a metric's label and what it means, as the
// metric's help text says it.
type Label struct{ Value, Meaning string }

// The label values the supervisor counts under, each with its meaning in
// the metric's help text; TestLabelValuesAreTheHelpTexts holds the
// supervisor's call sites to these.
var (
	// CrashCauses label vigil_worker_crashes_total.
	CrashCauses = []Label{{"exit", "an exit with a code"}, {"signal", "killed by a signal Vigil did not send"},
		{"hang", "its heartbeat expired"}, {"bad_heartbeat", "a heartbeat that is no timestamp"},
		{"start_timeout", "no first heartbeat within start_timeout"}, {"spawn", "the command could not be started"}}
	// RestartReasons label vigil_worker_restarts_total.
	RestartReasons = []Label{{"backoff", "automatic, after a counted crash"}, {"operator", "an operator's restart"},
		{"takeover", "this host took over a slot another host ran"}}
	// RecoveredReasons label vigil_recovered_jobs_total.
	RecoveredReasons = []Label{{"crash", "its worker crashed"}, {"stopped", "its worker exited after a stop, holding them"},
		{"fenced", "its worker exited while this host may not have held its slot alone"},
		{"supervisor_restart", "its worker was found dead by a restarted supervisor"},
		{"deferred", "Redis was away when its worker died, so they went back once it answered"}}
)

// labelHelp writes labels as "a: meaning; b: meaning".
func labelHelp(labels []Label) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.Value + ": " + l.Meaning
	}
	return strings.Join(parts, "; ")
}

// New registers Vigil's collectors on cfg.Registry (or a new registry).
func New(cfg Config) (*Metrics, error) {
	reg := cfg.Registry
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.ScrapeTimeout = cmp.Or(cfg.ScrapeTimeout, ScrapeTimeoutDefault)
	m := &Metrics{
		reg: reg,
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_worker_crashes_total",
			Help: "Counted worker crashes seen by this host, by queue, cause (" + labelHelp(CrashCauses) + ") and exit code."},
			[]string{"queue", "reason", "exit_code"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_worker_restarts_total",
			Help: "Worker starts after the first, by queue and reason (" + labelHelp(RestartReasons) + ")."},
			[]string{"queue", "reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_worker_failed_total",
			Help: "Workers this host marked failed (restart policy limit reached), by queue."},
			[]string{"queue"}),
		detection: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vigil_crash_detection_seconds",
			Help:    "From a worker's death (its exit, or its heartbeat's expiry) to the supervisor recording the crash, by cause (exit, hang).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}},
			[]string{"cause"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_recovered_jobs_total",
			Help: "Tasks of dead workers put straight back to pending (requeued:stale), by queue and reason (" + labelHelp(RecoveredReasons) + ")."},
			[]string{"queue", "reason"}),
		hostsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_hosts_lost_total",
			Help: "Hosts this host, as leader, found lost (lease expired)."}),
		redisFaults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_redis_faults_total",
			Help: "Times this host's supervisor lost Redis (it then holds its state in memory and judges no heartbeat), by kind: unreachable (no reply), or the refusal Redis answered (READONLY: a replica; CLUSTERDOWN: a slot range without a master; MASTERDOWN, LOADING, OOM, MISCONF, …)."},
			[]string{"kind"}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_sse_clients",
			Help: "Event stream (SSE) clients connected to this admin server."}),
		sseEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_sse_events_total",
			Help: "Entries of the event stream this admin server read and fanned out."}),
		sseDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_sse_lagged_disconnects_total",
			Help: "SSE clients disconnected for falling too far behind."}),
		alertResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_alerts_total",
			Help: "Webhook alerts by result (sent, failed, dropped)."}, []string{"result"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_worker_output_truncated_total",
			Help: "Worker output lines longer than the line limit, cut with a marker, by queue."}, []string{"queue"}),
		scratchDirs: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_scratch_removed_total",
			Help: "Kept scratch directories of this host removed by the janitor (past scratch_max_age, or oldest first past scratch_max_bytes)."}),
		scratchBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_scratch_removed_bytes_total",
			Help: "Bytes of the kept scratch directories the janitor removed."}),
		schedFires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_schedule_fires_total",
			Help: "Ticks and triggers of schedules decided by this host, by schedule and result (enqueued; duplicate: the unique option's lock was held; conflict: a task with the tick's id existed; skipped: a missed tick its catch-up policy skipped)."},
			[]string{"schedule", "result"}),
		schedLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vigil_schedule_lag_seconds",
			Help:    "From a schedule's tick to its task enqueued, on this host (missed ticks caught up included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_build_info",
		Help:        "Always 1; labels name the build.",
		ConstLabels: prometheus.Labels{"version": cmp.Or(cfg.Version, "dev"), "goversion": runtime.Version(), "asynq": queue.AsynqVersion}})
	build.Set(1)
	cs := []prometheus.Collector{m.crashes, m.restarts, m.failed, m.detection, m.recovered, m.hostsLost, m.redisFaults,
		m.sseClients, m.sseEvents, m.sseDropped, m.alertResults, m.truncated, m.schedFires, m.schedLag, m.scratchDirs, m.scratchBytes, build,
		processCounters{queue.DefaultMetrics}}
	if cfg.Store != nil {
		cs = append(cs, newRedisCollector(cfg))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Registry returns the registry the collectors are on.
func (m *Metrics) Registry() Registry { return m.reg }

// Handler serves the registry in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Crash counts a counted crash of a worker of queue: cause is exit,
// signal, hang, bad_heartbeat, start_timeout or spawn.
func (m *Metrics) Crash(queue, cause string, exitCode int) {
	if m != nil {
		m.crashes.WithLabelValues(queue, cause, strconv.Itoa(exitCode)).Inc()
	}
}

// Restart counts a start of a worker that had run before.
func (m *Metrics) Restart(queue, reason string) {
	if m != nil {
		m.restarts.WithLabelValues(queue, reason).Inc()
	}
}

// Failed counts a worker marked failed.
func (m *Metrics) Failed(queue string) {
	if m != nil {
		m.failed.WithLabelValues(queue).Inc()
	}
}

// Detected observes how long after a death its crash was recorded.
func (m *Metrics) Detected(cause string, d time.Duration) {
	if m != nil {
		m.detection.WithLabelValues(cause).Observe(max(d, 0).Seconds())
	}
}

// Recovered counts n tasks requeued from a dead worker.
func (m *Metrics) Recovered(queue, reason string, n int) {
	if m != nil && n > 0 {
		m.recovered.WithLabelValues(queue, reason).Add(float64(n))
	}
}

// HostLost counts a host found lost.
func (m *Metrics) HostLost() {
	if m != nil {
		m.hostsLost.Inc()
	}
}

// RedisFault counts an outage of Redis as the supervisor saw it begin, by
// kind: "unreachable", or the first word of the refusal ("READONLY",
// "CLUSTERDOWN", …).
func (m *Metrics) RedisFault(kind string) {
	if m != nil {
		m.redisFaults.WithLabelValues(kind).Inc()
	}
}

// OutputTruncated counts a worker output line cut at the line limit.
func (m *Metrics) OutputTruncated(queue string) {
	if m != nil {
		m.truncated.WithLabelValues(queue).Inc()
	}
}

// ScratchRemoved counts kept scratch directories the janitor removed.
func (m *Metrics) ScratchRemoved(dirs int, bytes int64) {
	if m != nil {
		m.scratchDirs.Add(float64(dirs))
		m.scratchBytes.Add(float64(bytes))
	}
}

// ScheduleFires counts n ticks (or triggers) of a schedule by result
// (package schedule's Metrics).
func (m *Metrics) ScheduleFires(schedule, result string, n int) {
	if m != nil && n > 0 {
		m.schedFires.WithLabelValues(schedule, result).Add(float64(n))
	}
}

// ScheduleLag observes the time from a tick to its enqueue.
func (m *Metrics) ScheduleLag(d time.Duration) {
	if m != nil {
		m.schedLag.Observe(max(d, 0).Seconds())
	}
}

// SSEClient counts an event client in (+1) or out (-1).
func (m *Metrics) SSEClient(delta int) {
	if m != nil {
		m.sseClients.Add(float64(delta))
	}
}

// SSEEvents counts n stream entries fanned out.
func (m *Metrics) SSEEvents(n int) {
	if m != nil {
		m.sseEvents.Add(float64(n))
	}
}

// SSELagged counts a client disconnected for lag.
func (m *Metrics) SSELagged() {
	if m != nil {
		m.sseDropped.Inc()
	}
}

// Alert counts an alert's result: sent, failed or dropped.
func (m *Metrics) Alert(result string) {
	if m != nil {
		m.alertResults.WithLabelValues(result).Inc()
	}
}

// processCounters exposes the process's own queue counters (the admin
// server's enqueues).
type processCounters struct{ m *queue.Metrics }

var duplicateDesc = prometheus.NewDesc("vigil_duplicate_skips_total",
	"Enqueues this process refused as duplicates (a Unique lock held, or a task id in use).", nil, nil)

var notDurableDesc = prometheus.NewDesc("vigil_enqueue_not_durable_total",
	"Durable enqueues (durable_enqueue) whose task did not reach the replicas asked for in time: answered 503.", nil, nil)

func (p processCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- duplicateDesc
	ch <- notDurableDesc
}

func (p processCounters) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(duplicateDesc, prometheus.CounterValue, float64(p.m.DuplicateSkips.Load()))
	ch <- prometheus.MustNewConstMetric(notDurableDesc, prometheus.CounterValue, float64(p.m.NotDurable.Load()))
}
