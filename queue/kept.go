package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/clock"
)

// MaxKeptDefault bounds the outcomes a worker keeps in memory.
const MaxKeptDefault = 10_000

// keptOutcomes are the task outcomes (asynq's done, complete, retry,
// archive, requeue writes) that Redis did not acknowledge: no reply came
// (an outage, a reset connection, a failover) or Redis refused the write
// (OOM, READONLY). asynq v0.26.0 cannot write them itself: its retry of a
// failed outcome reuses a context it has cancelled. The worker's hook takes
// such a write over (asynq is told it succeeded), and the task, still
// active under this process's owner field, waits here instead of running
// again after asynq's lease recovery.
//
// The API, for whatever learns that Redis may answer again (the link after
// an outage, a failover handler):
//
//   - keep(o): hold one outcome (the hook calls it); past max the oldest
//     is dropped, logged and counted (that task runs again).
//   - flush(ctx): write every kept outcome, each under the owner guard:
//     asynq's own script (toxicArchive for a toxic task's) runs only if
//     the task is still active and its owner field names this process.
//     One that is not any more (written by a reply that was lost, or
//     recovered by someone else) is dropped as stale. It stops at the first fault and keeps the rest.
//   - has(id), ids(), len(): what is kept (the stranded-task sweep leaves
//     kept tasks alone).
//
// Metrics: KeptOutcomes (now), KeptWritten, KeptStale, KeptDropped.
type keptOutcomes struct {
	owner   string // ownerOf this process
	max     int
	metrics *Metrics
	log     *slog.Logger
	clock   clock.Clock

	mu    sync.Mutex
	m     map[string]keptOutcome
	order []string // ids, oldest first (may hold ids gone from m)
}

// keptOutcome is one task's unacknowledged outcome: asynq's script call,
// replayed as it was (its times are those of the original call).
type keptOutcome struct {
	id     string
	script *outcomeScript
	keys   []string
	args   []any
	since  time.Time
	run    int64 // the run token of the dequeue it is the outcome of (0: unknown)
}

func newKeptOutcomes(owner string, max int, m *Metrics, log *slog.Logger, c clock.Clock) *keptOutcomes {
	if max <= 0 {
		max = MaxKeptDefault
	}
	return &keptOutcomes{owner: owner, max: max, metrics: m, log: log, clock: c, m: map[string]keptOutcome{}}
}

// keep holds o, replacing an older outcome of the same task.
func (k *keptOutcomes) keep(o keptOutcome) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[o.id]; !ok {
		k.order = append(k.order, o.id)
	}
	k.m[o.id] = o
	for len(k.m) > k.max {
		old := k.order[0]
		k.order = k.order[1:]
		if d, ok := k.m[old]; ok {
			delete(k.m, old)
			k.metrics.KeptDropped.Add(1)
			k.log.Error("kept outcomes full: an outcome is dropped, its task will run again", "task", old,
				"outcome", d.script.name, "kept_since", d.since, "max", k.max)
		}
	}
	k.metrics.KeptOutcomes.Store(int64(len(k.m)))
}

func (k *keptOutcomes) has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[id]
	return ok
}

func (k *keptOutcomes) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

func (k *keptOutcomes) ids() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.m))
	for id := range k.m {
		out = append(out, id)
	}
	return out
}

// snapshot returns the kept outcomes, oldest first, and compacts order.
func (k *keptOutcomes) snapshot() []keptOutcome {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]keptOutcome, 0, len(k.m))
	order := k.order[:0]
	for _, id := range k.order {
		if o, ok := k.m[id]; ok {
			out = append(out, o)
			order = append(order, id)
		}
	}
	k.order = order
	return out
}

// forget drops o if it is still the kept outcome of its task.
func (k *keptOutcomes) forget(o keptOutcome) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur, ok := k.m[o.id]; ok && cur.since.Equal(o.since) && cur.script == o.script {
		delete(k.m, o.id)
	}
	k.metrics.KeptOutcomes.Store(int64(len(k.m)))
}

// flushResult counts what a flush did.
type flushResult struct{ written, stale, left int }

// flush writes the kept outcomes, in one round trip (two when Redis lost
// the scripts). It returns the first fault's error, with every outcome
// not written still kept.
func (k *keptOutcomes) flush(ctx context.Context, rdb redis.UniversalClient) (flushResult, error) {
	all := k.snapshot()
	if len(all) == 0 {
		return flushResult{}, nil
	}
	cmds, err := k.send(ctx, rdb, all)
	if noScript(cmds) {
		for _, o := range all {
			if lerr := o.script.guarded.Load(ctx, rdb).Err(); lerr != nil {
				return flushResult{left: len(all)}, fmt.Errorf("write kept outcomes: load the guarded script: %w", lerr)
			}
		}
		cmds, err = k.send(ctx, rdb, all)
	}
	var res flushResult
	var first error
	for i, o := range all {
		cerr := cmds[i].Err()
		switch {
		case cerr == nil:
			res.written++
			k.forget(o)
			k.metrics.KeptWritten.Add(1)
			k.log.Info("kept outcome written", "task", o.id, "outcome", o.script.name, "kept_for", k.clock.Now().Sub(o.since).Round(time.Millisecond))
		case faultOf(cerr) == faultNone && isStale(cerr):
			res.stale++
			k.forget(o)
			k.metrics.KeptStale.Add(1)
			k.log.Info("kept outcome not needed: the task is no longer active under this process", "task", o.id,
				"outcome", o.script.name, "reply", cerr.Error())
		default:
			res.left++
			if first == nil {
				first = cerr
			}
		}
	}
	if first == nil && err != nil && res.left > 0 {
		first = err
	}
	if first != nil {
		return res, fmt.Errorf("write kept outcomes: %d written, %d stale, %d kept: %w", res.written, res.stale, res.left, first)
	}
	return res, nil
}

func (k *keptOutcomes) send(ctx context.Context, rdb redis.UniversalClient, all []keptOutcome) ([]*redis.Cmd, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(all))
	for i, o := range all {
		run := ""
		if o.run > 0 {
			run = strconv.FormatInt(o.run, 10)
		}
		args := append(append(make([]any, 0, len(o.args)+4), o.args...), ownerField, k.owner, runField, run)
		cmds[i] = o.script.guarded.EvalSha(ctx, pipe, o.keys, args...)
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

func noScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// isStale reports whether a guarded outcome's error reply says there is
// nothing to write: the task is not active under this process (the guard)
// or not where asynq's script expects it.
func isStale(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.Contains(msg, errNotOwned) || strings.Contains(msg, "NOT FOUND") // miniredis prefixes "ERR "
}
