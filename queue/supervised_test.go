package queue_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// pool describes the supervised pool of a test: testjobworker processes.
type pool struct {
	workers      int
	concurrency  int
	crashRetries int           // job_crash_retries (0 = the default, 2)
	backoff      time.Duration // restart delay (0 = 5ms)
	noRecoverer  bool          // the test calls Recover itself
	resultsDir   string        // VIGIL_RESULTS_DIR ("" = the default)
	env          map[string]string
}

// supervised is a real supervisor running the test's pool, with a
// Recoverer that first adds the dead pid to the ledger's "dead" set.
type supervised struct {
	e      *qenv
	sup    *supervisor.Supervisor
	ledger string
	ids    []health.ComponentID
}

func (e *qenv) supervise(p pool) *supervised {
	e.tb.Helper()
	if p.backoff == 0 {
		p.backoff = 5 * time.Millisecond
	}
	s := &supervised{e: e, ledger: e.Prefix + "ledger:"}
	var rec supervisor.Recoverer
	if !p.noRecoverer {
		rec = &ledgerRecoverer{s: s, inner: queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log, Metrics: new(queue.Metrics)})}
	}
	var crashRetries *int // nil: the default
	if p.crashRetries > 0 {
		crashRetries = &p.crashRetries
	}
	env := map[string]string{"TESTJOB_LEDGER": s.ledger, "TESTJOB_CHECK_INTERVAL": "10ms"}
	if p.resultsDir != "" {
		env[health.EnvResultsDir] = p.resultsDir
	}
	maps.Copy(env, p.env)
	sup, err := supervisor.New(supervisor.Config{
		Host: "h1", RedisURL: e.URL, Prefix: e.Prefix,
		Pools: []supervisor.Pool{{Queue: e.q, Workers: p.workers, Command: []string{testJobWorker},
			Concurrency: max(p.concurrency, 1), TaskTimeout: time.Minute,
			Env: env}},
		Heartbeat: supervisor.Heartbeat{Interval: 200 * time.Millisecond, TTL: 5 * time.Second, StartTimeout: 30 * time.Second},
		// Limits high enough that kills never turn a worker failed.
		Policy: policy.Config{BackoffBase: p.backoff, BackoffMax: p.backoff, MaxInWindow: 100_000, MaxLifetime: 100_000,
			JobCrashRetries: crashRetries},
		StopTimeout: 3 * time.Second,
		Recoverer:   rec,
		Logger:      e.log,
	}, e.store)
	if err != nil {
		e.tb.Fatalf("supervisor.New: %v", err)
	}
	s.sup = sup
	for slot := range p.workers {
		s.ids = append(s.ids, health.ComponentID{Queue: e.q, Slot: slot})
	}
	if err := sup.Start(context.Background()); err != nil {
		e.tb.Fatalf("supervisor start: %v", err)
	}
	e.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sup.Stop(ctx); err != nil {
			e.tb.Errorf("supervisor stop: %v", err)
		}
	})
	return s
}

// ledgerRecoverer marks the pid dead in the ledger, then requeues.
type ledgerRecoverer struct {
	s     *supervised
	inner *queue.Recoverer
}

func (r *ledgerRecoverer) Recover(ctx context.Context, id health.ComponentID, pid int, crashed bool) (int, error) {
	if err := r.s.e.Client.SAdd(ctx, r.s.ledger+"dead", strconv.Itoa(pid)).Err(); err != nil {
		return 0, err
	}
	return r.inner.Recover(ctx, id, pid, crashed)
}

// healthy returns the records of the pool's workers that are healthy now.
func (s *supervised) healthy() []health.Component {
	s.e.tb.Helper()
	cs, err := s.e.store.GetMany(context.Background(), s.ids)
	if err != nil {
		s.e.tb.Fatalf("read workers: %v", err)
	}
	var out []health.Component
	for _, c := range cs {
		if c.Status == health.StatusHealthy && c.PID > 0 {
			out = append(out, c)
		}
	}
	return out
}

// waitHealthy waits until every worker of the pool is healthy.
func (s *supervised) waitHealthy(w *watcher) []health.Component {
	s.e.tb.Helper()
	var cs []health.Component
	w.until("every worker healthy", waitTimeout, func([]streamEvent) bool {
		cs = s.healthy()
		return len(cs) == len(s.ids)
	})
	return cs
}

// counts reads a ledger hash of task → count.
func (s *supervised) counts(name string) map[string]int {
	s.e.tb.Helper()
	h, err := s.e.Client.HGetAll(context.Background(), s.ledger+name).Result()
	if err != nil {
		s.e.tb.Fatalf("read ledger %s: %v", name, err)
	}
	out := make(map[string]int, len(h))
	for k, v := range h {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

func (s *supervised) violations() []string {
	s.e.tb.Helper()
	v, err := s.e.Client.LRange(context.Background(), s.ledger+"violations", 0, -1).Result()
	if err != nil {
		s.e.tb.Fatalf("read ledger violations: %v", err)
	}
	return v
}

func kill(tb testing.TB, pid int) {
	tb.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		tb.Fatalf("kill %d: %v", pid, err)
	}
}

// explainMissing describes, for the tasks of ids never completed, where
// they are: asynq's view, the owner field, the running entries, the
// ledger's runs and the task's events (for a failure's report).
func (s *supervised) explainMissing(ids []string) string {
	s.e.tb.Helper()
	ctx := context.Background()
	comp, runs := s.counts("completions"), s.counts("runs")
	var b strings.Builder
	for _, id := range ids {
		if comp[id] > 0 {
			continue
		}
		fmt.Fprintf(&b, "task %s: ", id)
		if info, err := s.e.insp.GetTaskInfo(s.e.q, id); err != nil {
			fmt.Fprintf(&b, "asynq: %v; ", err)
		} else {
			fmt.Fprintf(&b, "asynq state %v retried %d last error %q next %s; ", info.State, info.Retried, info.LastErr,
				info.NextProcessAt.Format(time.RFC3339Nano))
		}
		owner := s.e.Client.HGet(ctx, "asynq:{"+s.e.q+"}:t:"+id, "vigil_owner").Val()
		lease := s.e.Client.ZScore(ctx, "asynq:{"+s.e.q+"}:lease", id).Val()
		fmt.Fprintf(&b, "owner %q lease %.0f (now %d); ledger runs %d; running entries:", owner, lease, time.Now().Unix(), runs[id])
		for _, c := range s.ids {
			if v := s.e.Client.HGet(ctx, s.e.store.Keys().Running(c), id).Val(); v != "" {
				fmt.Fprintf(&b, " %s=%s", c, v)
			}
		}
		fmt.Fprintf(&b, "; events:")
		for _, se := range s.e.events(queue.JobTopic(s.e.q, id)) {
			fmt.Fprintf(&b, " %s(pid %d)", se.job.State, se.job.PID)
		}
		b.WriteString("\n")
	}
	return b.String()
}
