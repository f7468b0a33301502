package queue

import (
	"expvar"
	"sync"
	"sync/atomic"
)

// Metrics are one process's job counters (docs/design.md §6; the seeds'
// worker.* metrics). They are published with expvar under "vigil_queue",
// and package metrics serves them on GET /metrics.
type Metrics struct {
	InflightJobs       atomic.Int64 // worker.inflight_jobs
	JobsDone           atomic.Int64
	JobsFailed         atomic.Int64 // handler errors, retried or not
	RetriesExhausted   atomic.Int64 // worker.retry_attempts_total{code=RETRIES_EXHAUSTED}
	ToxicJobs          atomic.Int64
	AbortedOnShutdown  atomic.Int64
	StuckHandlers      atomic.Int64 // handlers that did not return once their context ended (stuckGrace)
	RecoveredStale     atomic.Int64 // worker.recovered_jobs_total{reason=stale} (supervisor side)
	BackpressurePauses atomic.Int64 // worker.pauses_total
	DequeueSkips       atomic.Int64 // dequeues refused while backpressure held
	OutputsPublished   atomic.Int64 // Publish calls that committed an output
	ShortCircuits      atomic.Int64 // tasks marked done: their declared outputs existed
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
	// NotDurable counts durable enqueues answered before their task reached
	// the replicas asked for (vigil_enqueue_not_durable_total).
	NotDurable atomic.Int64

	// Redis faults (faults.go, link.go). RedisUnreachable counts the times
	// the worker lost Redis (a command got no reply); RedisSlowReplies the
	// replies slower than 500 ms; refusals by kind (OOM, READONLY, …) are
	// in RefusedByKind.
	RedisUnreachable atomic.Int64
	RedisSlowReplies atomic.Int64
	// DequeueNoAnswer counts dequeues that got no reply (they may have
	// taken a task); StrandedRequeued the tasks such replies stranded under
	// this process, requeued with no attempt counted.
	DequeueNoAnswer  atomic.Int64
	StrandedRequeued atomic.Int64
	// Prefetched counts tasks a dequeue took ahead for later calls of
	// asynq's (prefetch.go); PrefetchGivenBack those of them put back in
	// pending unrun (the worker paused, backpressure, stopping, or stale:
	// they waited past prefetchFresh).
	Prefetched        atomic.Int64
	PrefetchGivenBack atomic.Int64
	// Kept outcomes (kept.go): KeptOutcomes is how many wait now;
	// KeptWritten were written later, KeptStale turned out written or taken
	// by someone else, KeptDropped were dropped past the bound (those tasks
	// run again).
	KeptOutcomes atomic.Int64
	KeptWritten  atomic.Int64
	KeptStale    atomic.Int64
	KeptDropped  atomic.Int64
	// LeaseRecoverySkips counts tasks asynq's lease recovery would have
	// retried while their owner was alive (leases.go).
	LeaseRecoverySkips atomic.Int64
	// RecordsDropped counts bookkeeping writes (events, running records)
	// dropped while Redis was away, past the bound of those held.
	RecordsDropped atomic.Int64
	// RecordsHeld is how many bookkeeping writes wait for Redis now (a
	// gauge); a handler whose running record is among them has not begun.
	RecordsHeld atomic.Int64

	refusedMu sync.Mutex
	refused   map[string]int64
}

// countRefused counts a refusal of kind (OOM, READONLY, …).
func (m *Metrics) countRefused(kind string) {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	if m.refused == nil {
		m.refused = map[string]int64{}
	}
	m.refused[kind]++
}

// RefusedByKind returns the refusals counted by kind.
func (m *Metrics) RefusedByKind() map[string]int64 {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	out := make(map[string]int64, len(m.refused))
	for k, n := range m.refused {
		out[k] = n
	}
	return out
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
		"stuck_handlers":      m.StuckHandlers.Load(),
		"recovered_stale":     m.RecoveredStale.Load(),
		"backpressure_pauses": m.BackpressurePauses.Load(),
		"dequeue_skips":       m.DequeueSkips.Load(),
		"redis_unreachable":   m.RedisUnreachable.Load(),
		"redis_slow_replies":  m.RedisSlowReplies.Load(),
		"dequeue_no_answer":   m.DequeueNoAnswer.Load(),
		"stranded_requeued":   m.StrandedRequeued.Load(),
		"prefetched":          m.Prefetched.Load(),
		"prefetch_given_back": m.PrefetchGivenBack.Load(),
		"kept_outcomes":       m.KeptOutcomes.Load(),
		"kept_written":        m.KeptWritten.Load(),
		"kept_stale":          m.KeptStale.Load(),
		"kept_dropped":        m.KeptDropped.Load(),
		"lease_recovery_skip": m.LeaseRecoverySkips.Load(),
		"records_dropped":     m.RecordsDropped.Load(),
		"records_held":        m.RecordsHeld.Load(),
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
