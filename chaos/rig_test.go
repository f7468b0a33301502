package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// prefix is Vigil's key prefix in every scenario (each has a Redis of its
// own, so the default is fine).
const prefix = health.PrefixDefault

// rig is one scenario's world: Vigil's Redis, the ledger, a tail of the
// event stream, and clients to look at and feed the system.
type rig struct {
	t      *testing.T
	redis  *redisProc
	ledger *ledger
	store  *health.Store
	insp   *asynq.Inspector
	events *collector
	queues []string
	client *queue.Client
}

func newRig(t *testing.T, queues ...string) *rig {
	t.Helper()
	r := &rig{t: t, redis: newRedis(t), ledger: newLedger(t), queues: queues}
	r.store = health.NewStore(r.redis.c, prefix, 0)
	r.insp = asynq.NewInspectorFromRedisClient(r.redis.c)
	r.client = queue.NewClient(r.store, queue.ClientConfig{Queues: queues})
	r.events = collect(t, r.redis, prefix)
	t.Cleanup(func() { reapOrphans(t, r.ledger) })
	return r
}

// spec is a host of id running pools, on the rig's Redis, its workers
// writing to the rig's ledger.
func (r *rig) spec(id string, pools ...poolSpec) hostSpec {
	for i := range pools {
		env := r.ledger.env()
		for k, v := range pools[i].Env {
			env[k] = v
		}
		pools[i].Env = env
	}
	return hostSpec{ID: id, Redis: r.redis.URL, Pools: pools}
}

// enqueue puts n sleep jobs of lo to hi ms on q and returns their ids.
func (r *rig) enqueue(q string, n int, lo, hi int) []string {
	r.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ms := lo + rand.IntN(hi-lo+1)
		info, err := r.client.Enqueue(context.Background(), q, asynq.NewTask("sleep", []byte(strconv.Itoa(ms))),
			asynq.Retention(time.Hour), asynq.MaxRetry(25))
		if err != nil {
			r.t.Fatalf("enqueue: %v", err)
		}
		ids[i] = info.ID
	}
	return ids
}

func slots(q string, n int) []health.ComponentID {
	out := make([]health.ComponentID, n)
	for i := range out {
		out[i] = health.ComponentID{Queue: q, Slot: i}
	}
	return out
}

// records reads the components' records.
func (r *rig) records(ids []health.ComponentID) []health.Component {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := r.store.GetMany(ctx, ids)
	if err != nil {
		r.t.Fatalf("read components: %v", err)
	}
	return cs
}

// waitHealthy waits until every component is healthy in a process that is
// not one of gone (pids the test killed, whose crash the supervisor may
// not have recorded yet), and returns them.
func (r *rig) waitHealthy(ids []health.ComponentID, timeout time.Duration, gone ...map[int]bool) []health.Component {
	r.t.Helper()
	var cs []health.Component
	ok := r.events.wait(timeout, 200*time.Millisecond, func() bool {
		cs = r.records(ids)
		for _, c := range cs {
			if c.Status != health.StatusHealthy {
				return false
			}
			for _, g := range gone {
				if g[c.PID] {
					return false
				}
			}
		}
		return true
	})
	if !ok {
		r.t.Fatalf("not every worker healthy within %s: %s", timeout, describe(cs))
	}
	return cs
}

// waitDone waits until every task of ids has completed at least once (by
// the ledger).
func (r *rig) waitDone(ids []string, timeout time.Duration) {
	r.t.Helper()
	ok := r.events.wait(timeout, 100*time.Millisecond, func() bool {
		comp := r.ledger.completions()
		for _, id := range ids {
			if comp[id] == 0 {
				return false
			}
		}
		return true
	})
	if !ok {
		comp := r.ledger.completions()
		var missing []string
		for _, id := range ids {
			if comp[id] == 0 {
				missing = append(missing, id)
			}
		}
		r.t.Fatalf("%d of %d jobs not completed within %s (first: %v)", len(missing), len(ids), timeout, missing[:min(5, len(missing))])
	}
}

// waitAsynqSettled waits until asynq counts want completed tasks in q and
// nothing pending, active, scheduled or retrying, and returns its counts.
func (r *rig) waitAsynqSettled(q string, want int, timeout time.Duration) *asynq.QueueInfo {
	r.t.Helper()
	var info *asynq.QueueInfo
	ok := r.events.wait(timeout, 200*time.Millisecond, func() bool {
		var err error
		info, err = r.insp.GetQueueInfo(q)
		return err == nil && info.Completed == want && info.Pending+info.Active+info.Scheduled+info.Retry == 0
	})
	if !ok {
		r.t.Fatalf("asynq's queue %s did not settle at %d completed within %s: %+v", q, want, timeout, info)
	}
	return info
}

// archivedCount is what asynq archived, and how many of those no handler
// ever ran (by the ledger's runs).
type archivedCount struct{ all, unrun int }

// archivedUnrun counts the archived tasks of queues.
func (r *rig) archivedUnrun(runs map[string]int, queues ...string) archivedCount {
	r.t.Helper()
	var n archivedCount
	for _, q := range queues {
		for page := 1; ; page++ {
			tasks, err := r.insp.ListArchivedTasks(q, asynq.PageSize(500), asynq.Page(page))
			if err != nil {
				r.t.Fatalf("list archived tasks: %v", err)
			}
			if len(tasks) == 0 {
				break
			}
			for _, ti := range tasks {
				n.all++
				if runs[ti.ID] == 0 {
					n.unrun++
					r.t.Errorf("task %s of %s archived without a run: %s", ti.ID, q, ti.LastErr)
				}
			}
		}
	}
	return n
}

// retried counts the completed tasks of q that asynq retried: a task
// whose worker died and that was left to asynq's lease recovery (rather
// than requeued at once) shows as a failed attempt.
func (r *rig) retried(q string) int {
	r.t.Helper()
	n := 0
	for page := 1; ; page++ {
		tasks, err := r.insp.ListCompletedTasks(q, asynq.PageSize(500), asynq.Page(page))
		if err != nil {
			r.t.Fatalf("list completed tasks: %v", err)
		}
		if len(tasks) == 0 {
			return n
		}
		for _, ti := range tasks {
			if ti.Retried != 0 {
				n++
			}
		}
	}
}

// lifetime sums the components' lifetime restarts.
func lifetime(cs []health.Component) int {
	n := 0
	for _, c := range cs {
		n += c.Restarts.LifetimeRestarts
	}
	return n
}

func describe(cs []health.Component) string {
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("\n  %s %s pid=%d reason=%q restarts=%d/%d", c.ID, c.Status, c.PID, c.Reason,
			c.Restarts.RestartCount, c.Restarts.LifetimeRestarts)
	}
	return s
}

// result logs a scenario's measured counts in one line that RELIABILITY.md
// quotes.
func result(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("RESULT %s: "+format, append([]any{t.Name()}, args...)...)
}
