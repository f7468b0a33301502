package queue

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// recoverScript is the fast requeue of DESIGN.md §9, for every task a dead
// process held, in one atomic step on the queue's slot.
//
// A task is the dead process's when its owner field (written by the dequeue,
// see dequeue.go) names it, or when the process's running hash lists it
// and no owner field names anyone (a dequeue that did not go through the
// hook). It is put back only if it is still active: its lease entry exists
// and its hash says active. Then exactly what asynq's own shutdown requeue
// does: LREM active, ZREM lease, RPUSH pending (the front of the queue),
// HSET state pending + pending_since; and the owner field goes. The task's
// crash counter is incremented (TTL reset) only if the running hash lists
// it: its handler had begun. A task the process dequeued but never handed
// to a handler counts no crash (nothing of it ran). When it was the only
// one whose handler had begun, its solo counter (the crash counter's key +
// ":solo", health.JobSoloCrashesSuffix) is incremented too: that crash can
// only be its own (finding E12, see the middleware's toxic rule).
//
// The owner is added to the queue's dead owners (trimmed to the last
// deadOwnersKept): a dequeue it sent before it died that reaches Redis
// only now takes nothing (dequeue.go).
//
// KEYS: active, lease, pending, dead owners. ARGV: task key prefix, owner,
// pending_since (Unix ns), job key prefix, crash counter suffix, counter
// TTL (ms), owner field, then the task ids of the running hash. Returns
// {id, crashes, …}.
var recoverScript = redis.NewScript(`
local pfx, owner, field = ARGV[1], ARGV[2], ARGV[7]
local now_ms = math.floor(tonumber(ARGV[3]) / 1000000)
redis.call("ZADD", KEYS[4], now_ms, owner)
redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", now_ms - ` + deadOwnersKeptMS + `)
local cand, seen, ran = {}, {}, {}
for i = 8, #ARGV do ran[ARGV[i]] = true end
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
local live, nran = {}, 0
for _, id in ipairs(cand) do
	if redis.call("ZSCORE", KEYS[2], id) and redis.call("HGET", pfx .. id, "state") == "active" then
		live[#live+1] = id
		if ran[id] then nran = nran + 1 end
	end
end
local out = {}
for _, id in ipairs(live) do
	local key = pfx .. id
	do
		redis.call("LREM", KEYS[1], 0, id)
		redis.call("ZREM", KEYS[2], id)
		redis.call("RPUSH", KEYS[3], id)
		redis.call("HSET", key, "state", "pending", "pending_since", ARGV[3])
		redis.call("HDEL", key, field)
		local ck = ARGV[4] .. id .. ARGV[5]
		local n = 0
		if ran[id] then
			n = redis.call("INCR", ck)
			redis.call("PEXPIRE", ck, ARGV[6])
			if nran == 1 then
				redis.call("INCR", ck .. ":solo")
				redis.call("PEXPIRE", ck .. ":solo", ARGV[6])
			end
		else
			n = tonumber(redis.call("GET", ck) or "0")
		end
		out[#out+1] = id
		out[#out+1] = n
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
// pending (DESIGN.md §6, §9). It implements supervisor.Recoverer; call it
// only once the process has been reaped: on a live worker it would make
// tasks run twice.
type Recoverer struct {
	store *health.Store
	cfg   RecovererConfig
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
// died, increments the crash counter of each whose handler had begun,
// emits requeued:stale for each, and clears the process's running entries.
// It returns how many tasks went back. Three round trips; safe to call
// again (a second call finds nothing to requeue).
func (r *Recoverer) Recover(ctx context.Context, id health.ComponentID, pid int) (int, error) {
	keys, rdb := r.store.Keys(), r.store.Client()
	running, err := rdb.HGetAll(ctx, keys.Running(id)).Result()
	if err != nil {
		return 0, fmt.Errorf("recover tasks of %s pid %d: read running: %w", id, pid, err)
	}
	var stale []any // field, value pairs of pid's entries
	q, now := id.Queue, r.cfg.Clock.Now()
	argv := []any{asynqTaskPrefix(q), ownerOf(id, pid), now.UnixNano(), keys.JobPrefix(q),
		health.JobCrashesSuffix, JobKeyTTL.Milliseconds(), ownerField}
	for t, v := range running {
		if rt, ok := parseRunning(t, v); ok && rt.PID == pid {
			stale = append(stale, t, v)
			argv = append(argv, t)
		}
	}
	res, err := recoverScript.Run(ctx, rdb, []string{asynqActiveKey(q), asynqLeaseKey(q), asynqPendingKey(q), keys.DeadOwners(q)},
		argv...).Slice()
	if err != nil {
		return 0, fmt.Errorf("recover tasks of %s pid %d: requeue: %w", id, pid, err)
	}
	n := len(res) / 2
	if n == 0 && len(stale) == 0 {
		return 0, nil
	}
	pipe := rdb.Pipeline()
	if len(stale) > 0 {
		delIfScript.Eval(ctx, pipe, []string{keys.Running(id)}, stale...)
	}
	for i := 0; i+1 < len(res); i += 2 {
		t, _ := res[i].(string)
		crashes, _ := res[i+1].(int64)
		jobEvents(ctx, r.store, pipe, now, JobEvent{Queue: q, ID: t, State: StateRequeuedStale,
			Crashes: int(crashes), Component: id.String(), PID: pid})
		r.cfg.Logger.Info("requeued a dead worker's task", "component", id.String(), "pid", pid,
			"task", t, "crashes", crashes)
	}
	r.cfg.Metrics.RecoveredStale.Add(int64(n))
	if _, err := pipe.Exec(ctx); err != nil {
		return n, fmt.Errorf("recover tasks of %s pid %d: %d requeued, events or running entries not written: %w", id, pid, n, err)
	}
	return n, nil
}
