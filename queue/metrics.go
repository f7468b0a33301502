package queue

import (
	"expvar"
	"sync/atomic"
)

// Metrics are one process's job counters (DESIGN.md §6; the seeds'
// worker.* metrics). They are published with expvar under "vigil_queue"
// until the Prometheus endpoint exposes them.
type Metrics struct {
	InflightJobs       atomic.Int64 // worker.inflight_jobs
	JobsDone           atomic.Int64
	JobsFailed         atomic.Int64 // handler errors, retried or not
	RetriesExhausted   atomic.Int64 // worker.retry_attempts_total{code=RETRIES_EXHAUSTED}
	ToxicJobs          atomic.Int64
	AbortedOnShutdown  atomic.Int64
	RecoveredStale     atomic.Int64 // worker.recovered_jobs_total{reason=stale} (supervisor side)
	BackpressurePauses atomic.Int64 // worker.pauses_total
	DequeueSkips       atomic.Int64 // dequeues refused while backpressure held
	// Handler errors by code (worker.retry_attempts_total{code}); code
	// RETRY is an error asynq retries.
	Retried      atomic.Int64
	NonRetryable atomic.Int64
	NoHandler    atomic.Int64
	Revoked      atomic.Int64
	// AcquireFailures counts dequeues (the atomic pending → active step)
	// that failed with an error (worker.atomic_acquire_fail_total).
	AcquireFailures atomic.Int64
	// DuplicateSkips counts enqueues refused as duplicates: a Unique lock
	// held or a task id in use (worker.duplicate_skips_total).
	DuplicateSkips atomic.Int64
}

// DefaultMetrics are the counters of this process, used when a config names
// none.
var DefaultMetrics = new(Metrics)

func init() {
	expvar.Publish("vigil_queue", expvar.Func(func() any { return DefaultMetrics.Snapshot() }))
}

// Snapshot returns the counters by name.
func (m *Metrics) Snapshot() map[string]int64 {
	return map[string]int64{
		"inflight_jobs":       m.InflightJobs.Load(),
		"jobs_done":           m.JobsDone.Load(),
		"jobs_failed":         m.JobsFailed.Load(),
		"retries_exhausted":   m.RetriesExhausted.Load(),
		"toxic_jobs":          m.ToxicJobs.Load(),
		"aborted_on_shutdown": m.AbortedOnShutdown.Load(),
		"recovered_stale":     m.RecoveredStale.Load(),
		"backpressure_pauses": m.BackpressurePauses.Load(),
		"dequeue_skips":       m.DequeueSkips.Load(),
	}
}

// CodeRetry labels handler errors that asynq retries (they carry no code).
const CodeRetry = "RETRY"

// countFailure counts a handler error by its code.
func (m *Metrics) countFailure(code string) {
	switch code {
	case "":
		m.Retried.Add(1)
	case CodeRetriesExhausted:
		m.RetriesExhausted.Add(1)
	case CodeNonRetryable:
		m.NonRetryable.Add(1)
	case CodeNoHandler:
		m.NoHandler.Add(1)
	case CodeRevoked:
		m.Revoked.Add(1)
	}
}

// FailuresByCode returns the handler errors counted by code.
func (m *Metrics) FailuresByCode() map[string]int64 {
	return map[string]int64{
		CodeRetry:            m.Retried.Load(),
		CodeRetriesExhausted: m.RetriesExhausted.Load(),
		CodeNonRetryable:     m.NonRetryable.Load(),
		CodeNoHandler:        m.NoHandler.Load(),
		CodeRevoked:          m.Revoked.Load(),
	}
}
