package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// extendLease passes asynq's lease extension (every 5 s, for the tasks it
// runs) to Redis while the link is up. While it is not, or when no reply
// comes, asynq is told the extension succeeded: without it, asynq cancels
// a task 30 s after its last extension and never writes its outcome, and
// a worker that cannot reach Redis must finish what it runs. Redis's lease
// is extended again by asynq's next beat once it answers; meanwhile the
// lease recoverers of every worker of the queue leave the task alone,
// its owner being alive (listLeaseExpired).
func (h *redisHook) extendLease(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	c, ok := cmd.(*redis.IntCmd)
	if !ok {
		return next(ctx, cmd)
	}
	if !h.link.isUp() {
		c.SetVal(0)
		return nil
	}
	start := h.clock.Now()
	err := next(ctx, cmd)
	h.observe("extend lease", start, err)
	if faultOf(err) == faultNoAnswer {
		c.SetErr(nil)
		c.SetVal(0)
		return nil
	}
	return err
}

// leaseExpiredScript is asynq's listLeaseExpiredCmd that also returns each
// task's owner field and id.
//
// KEYS: lease. ARGV: cutoff (Unix s), task key prefix, owner field.
// Returns {msg, owner, id, …}.
const leaseExpiredSource = `
local res = {}
for _, id in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1])) do
	local key = ARGV[2] .. id
	local v = redis.call("HGET", key, "msg")
	if v then
		res[#res+1] = v
		res[#res+1] = redis.call("HGET", key, ARGV[3]) or ""
		res[#res+1] = id
	end
end
return res`

var leaseExpiredScript = redis.NewScript(leaseExpiredSource)

// listLeaseExpired answers asynq's recoverer (every worker of the queue
// runs one, each minute) with the expired tasks that no live process
// owns. asynq would move each to retry as a failed attempt, or archive it:
// right for a task whose process is gone without a supervisor to requeue
// it, wrong for a task whose owner is alive (it runs it, keeps its
// outcome, or requeues it as stranded once Redis answers). The owner is
// alive when its component record names its pid in a running status (the
// supervisor, which reaps it, is the one who says otherwise). This
// process's own tasks are left out while it holds them or keeps their
// outcome.
func (h *redisHook) listLeaseExpired(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return next(ctx, cmd)
	}
	args := cmd.Args() // evalsha sha 1 lease cutoff prefix
	sargs := []any{"evalsha", leaseExpiredScript.Hash(), 1, args[3], args[4], args[5], ownerField}
	start := h.clock.Now()
	run := redis.NewCmd(ctx, sargs...)
	err := next(ctx, run)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		sargs[0], sargs[1] = "eval", leaseExpiredSource
		run = redis.NewCmd(ctx, sargs...)
		err = next(ctx, run)
	}
	h.observe("list expired leases", start, err)
	if err != nil {
		c.SetErr(err)
		return err
	}
	res, _ := run.Val().([]any)
	msgs, err := h.unowned(ctx, res)
	if err != nil {
		c.SetErr(err)
		return err
	}
	c.SetVal(msgs)
	return nil
}

// unowned keeps the messages of {msg, owner, id} triples whose task no
// live process owns.
func (h *redisHook) unowned(ctx context.Context, res []any) ([]any, error) {
	type entry struct {
		msg, owner, id string
	}
	var all []entry
	others := map[string]int{} // owner → index in ids
	var ids []health.ComponentID
	var pids []int
	for i := 0; i+2 < len(res); i += 3 {
		e := entry{asString(res[i]), asString(res[i+1]), asString(res[i+2])}
		all = append(all, e)
		if e.owner == "" || e.owner == h.owner {
			continue
		}
		if _, ok := others[e.owner]; ok {
			continue
		}
		id, pid, ok := parseOwner(e.owner)
		if !ok {
			continue
		}
		others[e.owner] = len(ids)
		ids, pids = append(ids, id), append(pids, pid)
	}
	var recs []health.Component
	if len(ids) > 0 {
		var err error
		if recs, err = h.records(ctx, ids); err != nil {
			return nil, fmt.Errorf("read the owners of expired leases: %w", err)
		}
	}
	now := h.clock.Now()
	out := make([]any, 0, len(all))
	for _, e := range all {
		alive := false
		switch i, ok := others[e.owner]; {
		case e.owner == h.owner:
			alive = h.held.holds(e.id, now) || h.kept.has(e.id)
			if !alive {
				h.held.resolve(e.id)
			}
		case ok:
			alive = recs[i].PID == pids[i] && recs[i].Status.Running()
		}
		if alive {
			h.metrics.LeaseRecoverySkips.Add(1)
			continue
		}
		h.log.Warn("asynq's lease recovery takes a task no live process owns (it counts a failed attempt)",
			"task", e.id, "owner", e.owner)
		out = append(out, e.msg)
	}
	return out, nil
}

// parseOwner reads an owner field: "<component>:<pid>".
func parseOwner(s string) (health.ComponentID, int, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return health.ComponentID{}, 0, false
	}
	pid, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return health.ComponentID{}, 0, false
	}
	id, err := health.ParseComponentID(s[:i])
	if err != nil {
		return health.ComponentID{}, 0, false
	}
	return id, pid, true
}
