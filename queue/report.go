package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// Fields of a worker's stats hash (health.Keys.WorkerStats). Counters are
// cumulative over the component's life (its processes add to them); the
// in-flight count is the process's current one. A worker in another
// language may HINCRBY the same fields.
const (
	StatHeartbeats         = "heartbeats"
	StatHeartbeatFailures  = "heartbeat_failures"
	StatHeartbeatDegraded  = "heartbeat_degraded"
	StatInflight           = "inflight"
	StatJobsDone           = "jobs_done"
	StatToxicJobs          = "toxic_jobs"
	StatAbortedShutdown    = "aborted_shutdown"
	StatStuckHandlers      = "stuck_handlers"
	StatBackpressurePauses = "backpressure_pauses"
	StatAcquireFailures    = "acquire_failures"
	// StatFailurePrefix + a code (RETRY, RETRIES_EXHAUSTED, …) counts
	// handler errors by code.
	StatFailurePrefix = "failures:"
	// Redis faults (see Metrics): StatRefusedPrefix + a kind (OOM,
	// READONLY, …) counts refusals; StatKept is a gauge, as StatInflight.
	StatRedisUnreachable   = "redis_unreachable"
	StatRedisSlowReplies   = "redis_slow_replies"
	StatRefusedPrefix      = "redis_refused:"
	StatStrandedRequeued   = "stranded_requeued"
	StatPrefetched         = "prefetched"
	StatPrefetchGivenBack  = "prefetch_given_back"
	StatKept               = "kept_outcomes"
	StatKeptWritten        = "kept_written"
	StatKeptStale          = "kept_stale"
	StatKeptDropped        = "kept_dropped"
	StatLeaseRecoverySkips = "lease_recovery_skips"
	StatRecordsDropped     = "records_dropped"
)

// reportTimeout bounds one report.
const reportTimeout = 2 * time.Second

// reporter adds what the process counted since its last report to the
// component's stats hash, every heartbeat interval and once more at the
// end: workers are separate processes, and the supervisor's /metrics reads
// what they report. A report that fails is carried over to the next.
type reporter struct {
	rdb      redis.UniversalClient
	key      string
	metrics  *Metrics
	hb       *health.Heartbeater
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger
	sent     map[string]int64 // what earlier reports added
	// pauseKey is read in the same round trip: paused hears whether an
	// operator paused this worker.
	pauseKey string
	paused   func(bool)
}

func (w *worker) newReporter(hb *health.Heartbeater) *reporter {
	return &reporter{rdb: w.rdb, key: w.store.Keys().WorkerStats(w.id), metrics: w.metrics, hb: hb,
		interval: w.env.HeartbeatInterval, clock: w.clock, log: w.log, sent: map[string]int64{},
		pauseKey: w.store.Keys().WorkerPause(w.id), paused: w.setPaused}
}

// counts is what the process has counted so far, by field.
func (r *reporter) counts() map[string]int64 {
	m := r.metrics
	out := map[string]int64{
		StatHeartbeats:         r.hb.Beats(),
		StatHeartbeatFailures:  r.hb.Failed(),
		StatHeartbeatDegraded:  r.hb.Degraded(),
		StatJobsDone:           m.JobsDone.Load(),
		StatToxicJobs:          m.ToxicJobs.Load(),
		StatAbortedShutdown:    m.AbortedOnShutdown.Load(),
		StatStuckHandlers:      m.StuckHandlers.Load(),
		StatBackpressurePauses: m.BackpressurePauses.Load(),
		StatAcquireFailures:    m.AcquireFailures.Load(),
		StatRedisUnreachable:   m.RedisUnreachable.Load(),
		StatRedisSlowReplies:   m.RedisSlowReplies.Load(),
		StatStrandedRequeued:   m.StrandedRequeued.Load(),
		StatPrefetched:         m.Prefetched.Load(),
		StatPrefetchGivenBack:  m.PrefetchGivenBack.Load(),
		StatKeptWritten:        m.KeptWritten.Load(),
		StatKeptStale:          m.KeptStale.Load(),
		StatKeptDropped:        m.KeptDropped.Load(),
		StatLeaseRecoverySkips: m.LeaseRecoverySkips.Load(),
		StatRecordsDropped:     m.RecordsDropped.Load(),
	}
	for code, n := range m.FailuresByCode() {
		out[StatFailurePrefix+code] = n
	}
	for kind, n := range m.RefusedByKind() {
		out[StatRefusedPrefix+kind] = n
	}
	return out
}

// report adds the counts since the last report, and sets the in-flight
// gauge, in one round trip.
func (r *reporter) report(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	now := r.counts()
	pipe := r.rdb.Pipeline()
	for f, n := range now {
		if d := n - r.sent[f]; d != 0 {
			pipe.HIncrBy(ctx, r.key, f, d)
		}
	}
	pipe.HSet(ctx, r.key, StatInflight, r.metrics.InflightJobs.Load(), StatKept, r.metrics.KeptOutcomes.Load())
	paused := pipe.Exists(ctx, r.pauseKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("report worker stats: %w", err)
	}
	r.sent = now
	if r.paused != nil {
		r.paused(paused.Val() > 0)
	}
	return nil
}

// run reports every interval until ctx ends, then once more.
func (r *reporter) run(ctx context.Context) {
	tick := make(chan struct{}, 1)
	for {
		t := r.clock.AfterFunc(r.interval, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			t.Stop()
			if err := r.report(context.Background()); err != nil {
				r.log.Warn("last worker stats report", "err", err)
			}
			return
		case <-tick:
		}
		if err := r.report(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug("worker stats report failed; carried over", "err", err)
		}
	}
}

// WorkerStats are the counters a worker reported (see the Stat* fields).
type WorkerStats map[string]int64

// Failures returns the handler errors by code.
func (s WorkerStats) Failures() map[string]int64 {
	out := map[string]int64{}
	for f, n := range s {
		if code, ok := strings.CutPrefix(f, StatFailurePrefix); ok {
			out[code] = n
		}
	}
	return out
}

// Refused returns the refusals by kind (OOM, READONLY, …).
func (s WorkerStats) Refused() map[string]int64 {
	out := map[string]int64{}
	for f, n := range s {
		if kind, ok := strings.CutPrefix(f, StatRefusedPrefix); ok {
			out[kind] = n
		}
	}
	return out
}

// ReadWorkerStats reads the stats of ids in one round trip (empty for a
// component that never reported).
func ReadWorkerStats(ctx context.Context, store *health.Store, ids []health.ComponentID) ([]WorkerStats, error) {
	pipe := store.Client().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, store.Keys().WorkerStats(id))
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read worker stats: %w", err)
		}
	}
	out := make([]WorkerStats, len(ids))
	for i, c := range cmds {
		s := WorkerStats{}
		for f, v := range c.Val() {
			s[f], _ = strconv.ParseInt(v, 10, 64)
		}
		out[i] = s
	}
	return out, nil
}
