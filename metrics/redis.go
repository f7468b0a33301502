package metrics

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// Descriptions of what redisCollector reads at scrape time.
var (
	workersDesc = prometheus.NewDesc("vigil_workers",
		"Workers of this host by queue and status.", []string{"queue", "status"}, nil)

	wLabels          = []string{"queue", "component"}
	heartbeatsDesc   = prometheus.NewDesc("vigil_worker_heartbeats_total", "Heartbeats the worker wrote (reported by the worker).", wLabels, nil)
	hbFailuresDesc   = prometheus.NewDesc("vigil_worker_heartbeat_failures_total", "Heartbeats the worker failed to write.", wLabels, nil)
	hbDegradedDesc   = prometheus.NewDesc("vigil_worker_heartbeat_degraded_total", "Times the worker's heartbeat turned degraded (3 failures in a row: HEARTBEAT_DEGRADED).", wLabels, nil)
	inflightDesc     = prometheus.NewDesc("vigil_worker_inflight_jobs", "Jobs the worker runs now (0 unless it is running).", wLabels, nil)
	jobsDoneDesc     = prometheus.NewDesc("vigil_worker_jobs_done_total", "Jobs the worker completed.", wLabels, nil)
	toxicDesc        = prometheus.NewDesc("vigil_worker_toxic_jobs_total", "Jobs the worker archived as toxic (they crashed workers too often) without running them.", wLabels, nil)
	abortedDesc      = prometheus.NewDesc("vigil_worker_shutdown_requeues_total", "Jobs requeued because the worker's shutdown outlasted them (aborted:shutdown).", wLabels, nil)
	stuckDesc        = prometheus.NewDesc("vigil_worker_stuck_handlers_total", "Handlers that did not return once their task's context ended (its deadline, a cancel): each ends its worker process, and the task is requeued with a crash counted (stuck).", wLabels, nil)
	pausesDesc       = prometheus.NewDesc("vigil_worker_backpressure_pauses_total", "Times backpressure stopped the worker's dequeuing.", wLabels, nil)
	acquireFailsDesc = prometheus.NewDesc("vigil_worker_atomic_acquire_failures_total", "Dequeues (the atomic pending to active step) that failed with an error.", wLabels, nil)
	unreachableDesc  = prometheus.NewDesc("vigil_worker_redis_unreachable_total", "Times the worker lost Redis (a command got no reply): it then takes no task until Redis answers.", wLabels, nil)
	slowDesc         = prometheus.NewDesc("vigil_worker_redis_slow_replies_total", "Redis replies to the worker slower than 500 ms.", wLabels, nil)
	refusedDesc      = prometheus.NewDesc("vigil_worker_redis_refused_total", "Writes Redis refused the worker, by kind (OOM, READONLY, MISCONF, …).", append(wLabels, "kind"), nil)
	strandedDesc     = prometheus.NewDesc("vigil_worker_stranded_requeues_total", "Tasks a lost dequeue reply left active under the worker, requeued by it with no attempt counted.", wLabels, nil)
	prefetchDesc     = prometheus.NewDesc("vigil_worker_prefetched_total", "Tasks a dequeue took ahead of the worker's handler calls, by result: taken (all of them), given_back (put back in pending unrun: the worker was paused, under backpressure or stopping, or every slot stayed busy past the freshness bound and the idle check gave them back).", append(wLabels, "result"), nil)
	keptDesc         = prometheus.NewDesc("vigil_worker_kept_outcomes", "Task outcomes the worker keeps in memory because Redis did not take them (0 unless it is running).", wLabels, nil)
	keptTotalDesc    = prometheus.NewDesc("vigil_worker_kept_outcomes_total", "Kept task outcomes by result: written, stale (written already or taken by someone else), dropped (past the bound: the task runs again).", append(wLabels, "result"), nil)
	leaseSkipsDesc   = prometheus.NewDesc("vigil_worker_lease_recovery_skips_total", "Tasks asynq's lease recovery would have retried while their owner process was alive.", wLabels, nil)
	recDroppedDesc   = prometheus.NewDesc("vigil_worker_records_dropped_total", "Task records and events dropped while Redis was away, past the bound of those held.", wLabels, nil)
	retriesDesc      = prometheus.NewDesc("vigil_worker_retry_attempts_total", "Failed job attempts by code (RETRY: asynq retries it; NO_HANDLER: no handler knows the type, retried per MaxRetry then archived; RETRIES_EXHAUSTED, NON_RETRYABLE, REVOKED: final).", append(wLabels, "code"), nil)

	qJobsDesc     = prometheus.NewDesc("vigil_queue_jobs", "Jobs in the queue by state, from asynq (cluster-wide: the same on every host).", []string{"queue", "state"}, nil)
	qLatencyDesc  = prometheus.NewDesc("vigil_queue_latency_seconds", "Age of the queue's oldest pending job, from asynq (cluster-wide).", []string{"queue"}, nil)
	qPausedDesc   = prometheus.NewDesc("vigil_queue_paused", "1 when asynq has the queue paused (cluster-wide).", []string{"queue"}, nil)
	qProcessed    = prometheus.NewDesc("vigil_queue_processed_total", "Jobs processed, from asynq's all-time count (cluster-wide).", []string{"queue"}, nil)
	qFailed       = prometheus.NewDesc("vigil_queue_failed_total", "Job attempts that failed, from asynq's all-time count (cluster-wide).", []string{"queue"}, nil)
	scrapeErrDesc = prometheus.NewDesc("vigil_scrape_errors", "Redis reads that failed during this scrape, by part (workers, queues).", []string{"part"}, nil)
)

// statuses are reported with 0 when no worker has them, so that series do
// not come and go.
var statuses = health.Statuses

// redisCollector reads workers and queues from Redis at scrape time.
type redisCollector struct {
	store   *health.Store
	host    string
	queues  []string
	timeout time.Duration
	log     *slog.Logger

	once sync.Once
	insp *asynq.Inspector
}

func newRedisCollector(cfg Config) *redisCollector {
	q := slices.Clone(cfg.Queues)
	slices.Sort(q)
	return &redisCollector{store: cfg.Store, host: cfg.Host, queues: slices.Compact(q), timeout: cfg.ScrapeTimeout, log: cfg.Logger}
}

func (c *redisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workersDesc, heartbeatsDesc, hbFailuresDesc, hbDegradedDesc, inflightDesc,
		jobsDoneDesc, toxicDesc, abortedDesc, stuckDesc, pausesDesc, acquireFailsDesc, retriesDesc,
		unreachableDesc, slowDesc, refusedDesc, strandedDesc, prefetchDesc, keptDesc, keptTotalDesc, leaseSkipsDesc, recDroppedDesc,
		qJobsDesc, qLatencyDesc, qPausedDesc, qProcessed, qFailed, scrapeErrDesc} {
		ch <- d
	}
}

func (c *redisCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	werr := c.collectWorkers(ctx, ch)
	qerr := c.collectQueues(ctx, ch)
	for part, err := range map[string]error{"workers": werr, "queues": qerr} {
		n := 0.0
		if err != nil {
			n = 1
			c.log.Warn("metrics: read "+part+" from redis", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, n, part)
	}
}

func (c *redisCollector) collectWorkers(ctx context.Context, ch chan<- prometheus.Metric) error {
	all, err := c.store.List(ctx)
	if err != nil {
		return err
	}
	counts := map[string]map[health.Status]int{}
	for _, q := range c.queues {
		counts[q] = map[health.Status]int{}
	}
	var mine []health.Component
	for _, w := range all {
		if w.Host != c.host {
			continue
		}
		mine = append(mine, w)
		if counts[w.ID.Queue] == nil {
			counts[w.ID.Queue] = map[health.Status]int{}
		}
		counts[w.ID.Queue][w.Status]++
	}
	for q, byStatus := range counts {
		for _, st := range statuses {
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(byStatus[st]), q, string(st))
		}
	}
	ids := make([]health.ComponentID, len(mine))
	for i, w := range mine {
		ids[i] = w.ID
	}
	stats, err := queue.ReadWorkerStats(ctx, c.store, ids)
	if err != nil {
		return err
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for i, w := range mine {
		s, q, id := stats[i], w.ID.Queue, w.ID.String()
		counter(heartbeatsDesc, s[queue.StatHeartbeats], q, id)
		counter(hbFailuresDesc, s[queue.StatHeartbeatFailures], q, id)
		counter(hbDegradedDesc, s[queue.StatHeartbeatDegraded], q, id)
		counter(jobsDoneDesc, s[queue.StatJobsDone], q, id)
		counter(toxicDesc, s[queue.StatToxicJobs], q, id)
		counter(abortedDesc, s[queue.StatAbortedShutdown], q, id)
		counter(stuckDesc, s[queue.StatStuckHandlers], q, id)
		counter(pausesDesc, s[queue.StatBackpressurePauses], q, id)
		counter(acquireFailsDesc, s[queue.StatAcquireFailures], q, id)
		for _, code := range []string{queue.CodeRetry, queue.CodeRetriesExhausted, queue.CodeNonRetryable, queue.CodeNoHandler, queue.CodeRevoked} {
			counter(retriesDesc, s.Failures()[code], q, id, code)
		}
		counter(unreachableDesc, s[queue.StatRedisUnreachable], q, id)
		counter(slowDesc, s[queue.StatRedisSlowReplies], q, id)
		for kind, n := range s.Refused() {
			counter(refusedDesc, n, q, id, kind)
		}
		counter(strandedDesc, s[queue.StatStrandedRequeued], q, id)
		counter(prefetchDesc, s[queue.StatPrefetched], q, id, "taken")
		counter(prefetchDesc, s[queue.StatPrefetchGivenBack], q, id, "given_back")
		counter(keptTotalDesc, s[queue.StatKeptWritten], q, id, "written")
		counter(keptTotalDesc, s[queue.StatKeptStale], q, id, "stale")
		counter(keptTotalDesc, s[queue.StatKeptDropped], q, id, "dropped")
		counter(leaseSkipsDesc, s[queue.StatLeaseRecoverySkips], q, id)
		counter(recDroppedDesc, s[queue.StatRecordsDropped], q, id)
		inflight, kept := 0.0, 0.0
		if w.Status.Running() {
			inflight, kept = float64(s[queue.StatInflight]), float64(s[queue.StatKept])
		}
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, inflight, q, id)
		ch <- prometheus.MustNewConstMetric(keptDesc, prometheus.GaugeValue, kept, q, id)
	}
	return nil
}

func (c *redisCollector) collectQueues(ctx context.Context, ch chan<- prometheus.Metric) error {
	c.once.Do(func() { c.insp = asynq.NewInspectorFromRedisClient(c.store.Client()) })
	// GetQueueInfo's "not found" is no ErrQueueNotFound (asynq v0.26.0):
	// ask which queues asynq knows.
	known, err := c.insp.Queues()
	if err != nil {
		return err
	}
	var errs []error
	for _, q := range c.queues {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		info, err := &asynq.QueueInfo{Queue: q}, error(nil) // never seen a task yet
		if slices.Contains(known, q) {
			info, err = c.insp.GetQueueInfo(q)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed, "aggregating": info.Aggregating} {
			ch <- prometheus.MustNewConstMetric(qJobsDesc, prometheus.GaugeValue, float64(n), q, state)
		}
		paused := 0.0
		if info.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(qLatencyDesc, prometheus.GaugeValue, info.Latency.Seconds(), q)
		ch <- prometheus.MustNewConstMetric(qPausedDesc, prometheus.GaugeValue, paused, q)
		ch <- prometheus.MustNewConstMetric(qProcessed, prometheus.CounterValue, float64(info.ProcessedTotal), q)
		ch <- prometheus.MustNewConstMetric(qFailed, prometheus.CounterValue, float64(info.FailedTotal), q)
	}
	return errors.Join(errs...)
}
