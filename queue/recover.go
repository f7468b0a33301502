package queue

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// recoverFindScript is the first step of the fast requeue of docs/design.md
// §9: it finds every task a dead process held, marks the process dead, and
// changes nothing else. The requeue itself (recoverScript) comes after the
// tasks' requeued:stale events are written: the event stream is in another
// Redis Cluster slot than the queue, so no one script can do both, and a
// task visible as pending before its event could be dequeued and announced
// processing first (TestRequeueEventBeforePending).
//
// A task is the dead process's when its owner field (written by the dequeue,
// see dequeue.go) names it, or when the process's running hash lists it
// and no owner field names anyone (a dequeue that did not go through the
// hook). It is put back only if it is still active: its lease entry exists
// and its hash says active.
//
// The owner is added to the queue's dead owners (trimmed to the last
// deadOwnersKept): a dequeue it sent before it died that reaches Redis
// only now takes nothing (dequeue.go).
//
// A task counts as run (its handler had begun: the running hash lists it)
// only when the process crashed (count is "1"): the tasks of a process that
// was stopped did not crash it, even when it could not put them back
// itself (TestRecoverAfterAStopCountsNoCrash).
//
// KEYS: active, lease, dead owners. ARGV: task key prefix, owner,
// pending_since (Unix ns), job key prefix, crash counter suffix, owner
// field, count (1|0), then the task ids of the running hash. Returns {id,
// ran (0|1), crashes once requeued, …}.
var recoverFindScript = redis.NewScript(`
local pfx, owner, field = ARGV[1], ARGV[2], ARGV[6]
local now_ms = math.floor(tonumber(ARGV[3]) / 1000000)
redis.call("ZADD", KEYS[3], now_ms, owner)
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now_ms - ` + deadOwnersKeptMS + `)
local cand, seen, ran = {}, {}, {}
if ARGV[7] == "1" then for i = 8, #ARGV do ran[ARGV[i]] = true end end
for _, id in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do
	if redis.call("HGET", pfx .. id, field) == owner then
		cand[#cand+1] = id
		seen[id] = true
	end
end
for i = 8, #ARGV do
	local id = ARGV[i]
	if not seen[id] and not redis.call("HGET", pfx .. id, field) then
		cand[#cand+1] = id
		seen[id] = true
	end
end
local out = {}
for _, id in ipairs(cand) do
	if redis.call("ZSCORE", KEYS[2], id) and redis.call("HGET", pfx .. id, "state") == "active" then
		local n = tonumber(redis.call("GET", ARGV[4] .. id .. ARGV[5]) or "0")
		local r = 0
		if ran[id] then r = 1; n = n + 1 end
		out[#out+1] = id
		out[#out+1] = r
		out[#out+1] = n
	end
end
return out`)

// recoverScript puts back the tasks recoverFindScript found, once their
// events are written: exactly what asynq's own shutdown requeue does: LREM
// active, ZREM lease, RPUSH pending (the front of the queue), HSET state
// pending + pending_since; and the owner field goes. Each is checked again
// (still active, its owner field the dead process's or none). The task's
// crash counter is incremented (TTL reset) only if its handler had begun
// (ran). A task the process dequeued but never handed to a handler counts
// no crash (nothing of it ran). When it was the only one whose handler had
// begun, its solo counter (the crash counter's key + ":solo",
// health.JobSoloCrashesSuffix) is incremented too: that crash can only be
// its own (see the middleware's toxic rule;
// TestRecoverPicksOnlyTheDeadProcessesActiveTasks).
//
// KEYS: active, lease, pending. ARGV: task key prefix, owner,
// pending_since (Unix ns), job key prefix, crash counter suffix, counter
// TTL (ms), owner field, then id, ran (0|1) pairs. Returns the ids put
// back.
var recoverScript = redis.NewScript(`
local pfx, owner, field = ARGV[1], ARGV[2], ARGV[7]
local nran = 0
for i = 8, #ARGV, 2 do if ARGV[i+1] == "1" then nran = nran + 1 end end
local out = {}
for i = 8, #ARGV, 2 do
	local id, ran = ARGV[i], ARGV[i+1] == "1"
	local key = pfx .. id
	local o = redis.call("HGET", key, field)
	if (not o or o == owner) and redis.call("ZSCORE", KEYS[2], id) and redis.call("HGET", key, "state") == "active" then
		redis.call("LREM", KEYS[1], 0, id)
		redis.call("ZREM", KEYS[2], id)
		redis.call("RPUSH", KEYS[3], id)
		redis.call("HSET", key, "state", "pending", "pending_since", ARGV[3])
		redis.call("HDEL", key, field)
		if ran then
			local ck = ARGV[4] .. id .. ARGV[5]
			redis.call("INCR", ck)
			redis.call("PEXPIRE", ck, ARGV[6])
			if nran == 1 then
				redis.call("INCR", ck .. ":solo")
				redis.call("PEXPIRE", ck .. ":solo", ARGV[6])
			end
		end
		out[#out+1] = id
	end
end
return out`)

// deadOwnersKeptMS is how long a dead owner stays in the dead owners set
// (an hour, in ms): far longer than a command can wait on its way.
const deadOwnersKeptMS = "3600000"

// delIfScript deletes hash fields that still hold the given values.
// KEYS: the hash. ARGV: field, value, field, value …
var delIfScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
	if redis.call("HGET", KEYS[1], ARGV[i]) == ARGV[i+1] then
		n = n + redis.call("HDEL", KEYS[1], ARGV[i])
	end
end
return n`)

// RecovererConfig configures a Recoverer; every field is optional.
type RecovererConfig struct {
	Logger  *slog.Logger
	Clock   clock.Clock
	Metrics *Metrics
}

// Recoverer puts the tasks of a dead worker process straight back to
// pending (docs/design.md §6, §9). It implements supervisor.Recoverer; call it
// only once the process has been reaped: on a live worker it would make
// tasks run twice.
type Recoverer struct {
	store *health.Store
	cfg   RecovererConfig
	// afterRequeue, tests only: called once the tasks are pending again.
	afterRequeue func()
}

// NewRecoverer returns a Recoverer on store.
func NewRecoverer(store *health.Store, cfg RecovererConfig) *Recoverer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = DefaultMetrics
	}
	return &Recoverer{store: store, cfg: cfg}
}

// Recover requeues every task that process pid of component id held when it
// died, increments the crash counter of each whose handler had begun if
// the process crashed (see supervisor.Recoverer), emits requeued:stale for
// each, and clears the process's running entries.
// It returns how many tasks went back. Four round trips; safe to call
// again (a second call finds nothing to requeue).
//
// Each task's requeued:stale event is written before the task is pending
// again: no processing of its next run can come before it on the stream
// (TestRequeueEventBeforePending). A task found but not active any more
// when the requeue comes (asynq's lease recovery took it meanwhile: only
// after a long outage) keeps its event without being requeued here.
func (r *Recoverer) Recover(ctx context.Context, id health.ComponentID, pid int, crashed bool) (int, error) {
	keys, rdb := r.store.Keys(), r.store.Client()
	running, err := rdb.HGetAll(ctx, keys.Running(id)).Result()
	if err != nil {
		return 0, fmt.Errorf("recover tasks of %s pid %d: read running: %w", id, pid, err)
	}
	var stale []any // field, value pairs of pid's entries
	q, now, owner := id.Queue, r.cfg.Clock.Now(), ownerOf(id, pid)
	count := "0"
	if crashed {
		count = "1"
	}
	argv := []any{asynqTaskPrefix(q), owner, now.UnixNano(), keys.JobPrefix(q), health.JobCrashesSuffix, ownerField, count}
	for t, v := range running {
		if rt, ok := parseRunning(t, v); ok && rt.PID == pid {
			stale = append(stale, t, v)
			argv = append(argv, t)
		}
	}
	found, err := recoverFindScript.Run(ctx, rdb, []string{asynqActiveKey(q), asynqLeaseKey(q), keys.DeadOwners(q)}, argv...).Slice()
	if err != nil {
		return 0, fmt.Errorf("recover tasks of %s pid %d: find: %w", id, pid, err)
	}
	if len(found) == 0 && len(stale) == 0 {
		return 0, nil
	}
	// 1. The events, before any task is visible again.
	if len(found) > 0 {
		pipe := rdb.Pipeline()
		for i := 0; i+2 < len(found); i += 3 {
			t, _ := found[i].(string)
			crashes, _ := found[i+2].(int64)
			jobEvents(ctx, r.store, pipe, now, JobEvent{Queue: q, ID: t, State: StateRequeuedStale,
				Crashes: int(crashes), Component: id.String(), PID: pid})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("recover tasks of %s pid %d: write %d requeue events: %w", id, pid, len(found)/3, err)
		}
	}
	// 2. The requeue of what is still the dead process's.
	n := 0
	if len(found) > 0 {
		rq := []any{asynqTaskPrefix(q), owner, now.UnixNano(), keys.JobPrefix(q), health.JobCrashesSuffix,
			JobKeyTTL.Milliseconds(), ownerField}
		for i := 0; i+2 < len(found); i += 3 {
			ran, _ := found[i+1].(int64)
			rq = append(rq, found[i], strconv.FormatInt(ran, 10))
		}
		res, err := recoverScript.Run(ctx, rdb, []string{asynqActiveKey(q), asynqLeaseKey(q), asynqPendingKey(q)}, rq...).StringSlice()
		if err != nil {
			return 0, fmt.Errorf("recover tasks of %s pid %d: requeue: %w", id, pid, err)
		}
		n = len(res)
		for i := 0; i+2 < len(found); i += 3 {
			r.cfg.Logger.Info("requeued a dead worker's task", "component", id.String(), "pid", pid,
				"task", found[i], "crashes", found[i+2])
		}
		r.cfg.Metrics.RecoveredStale.Add(int64(n))
		if r.afterRequeue != nil {
			r.afterRequeue()
		}
	}
	// 3. The process's running entries.
	if len(stale) > 0 {
		if err := delIfScript.Run(ctx, rdb, []string{keys.Running(id)}, stale...).Err(); err != nil {
			return n, fmt.Errorf("recover tasks of %s pid %d: %d requeued, running entries not cleared: %w", id, pid, n, err)
		}
	}
	return n, nil
}
