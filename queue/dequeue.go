package queue

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// vigilDequeueScript is asynq's dequeue (asynqDequeueSource) plus, in the
// same atomic step, the owner field on the task hash and the read of the
// task's crash counter. Because the owner is written by the very script
// that makes the task active, a worker killed at any moment after a
// dequeue is found by Recover: there is no window between "active in
// asynq" and "recorded as ours".
//
// The owner must not be one Recover declared dead: a dequeue a process
// sent just ahead of its kill can still reach Redis after Recover put its
// tasks back (miniredis serves connections in no set order; a proxy or a
// slow network can hold a command); it would take a task for a process
// that is gone, left to asynq's lease recovery
// (TestRecoverPicksOnlyTheDeadProcessesActiveTasks).
//
// It takes up to ARGV[9] tasks (1 if absent) in one call (prefetch.go):
// each as asynq's dequeue would, one after the other.
//
// KEYS: pending, paused, active, lease (as asynq's), dead owners. ARGV:
// lease expiry (Unix s), task key prefix (as asynq's), owner field,
// owner, job key prefix, crash counter suffix, solo crash counter suffix,
// run token field, most tasks to take. Returns {msg, id, crashes, solo
// crashes, run token} for each task taken, in the order taken, or nil.
const vigilDequeueSource = `
if redis.call("EXISTS", KEYS[2]) == 1 or redis.call("ZSCORE", KEYS[5], ARGV[4]) then
	return nil
end
local out = {}
for i = 1, tonumber(ARGV[9] or "1") do
	local id = redis.call("RPOPLPUSH", KEYS[1], KEYS[3])
	if not id then break end
	local key = ARGV[2] .. id
	redis.call("HSET", key, "state", "active", ARGV[3], ARGV[4])
	local run = redis.call("HINCRBY", key, ARGV[8], 1)
	redis.call("HDEL", key, "pending_since")
	redis.call("ZADD", KEYS[4], ARGV[1], id)
	local n = redis.call("GET", ARGV[5] .. id .. ARGV[6])
	local solo = redis.call("GET", ARGV[5] .. id .. ARGV[7])
	local t = #out
	out[t+1], out[t+2], out[t+3], out[t+4], out[t+5] = redis.call("HGET", key, "msg"), id, n or "0", solo or "0", run
end
if #out == 0 then return nil end
return out`

var vigilDequeueScript = redis.NewScript(vigilDequeueSource)

// ownerOf is the owner field's value for process pid of component id.
func ownerOf(id health.ComponentID, pid int) string { return id.String() + ":" + strconv.Itoa(pid) }

// maxCrashEntries bounds the crash counts kept for the middleware: a task
// asynq dequeues but never hands to the handler (its deadline passed)
// leaves its entry behind.
const maxCrashEntries = 10_000

// crashRecord is a task's crash counters: every crash of a worker running
// its handler, and those of them where it was the only handler running.
type crashRecord struct{ all, solo int }

// takeCrashes returns the crash counters the dequeue of task id read, once.
func (h *redisHook) takeCrashes(id string) (crashRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.crashes[id]
	delete(h.crashes, id)
	return n, ok
}

func (h *redisHook) putCrashes(id string, n crashRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashes == nil || len(h.crashes) >= maxCrashEntries {
		h.crashes = map[string]crashRecord{} // the middleware reads the counters itself then
	}
	h.crashes[id] = n
}

// markToxic notes that task id was given the toxic verdict: its archive is
// written with its crash counters' delete (toxicArchive).
func (h *redisHook) markToxic(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.toxic == nil || len(h.toxic) >= maxCrashEntries {
		h.toxic = map[string]struct{}{} // a lost mark costs a counter left behind, not a run
	}
	h.toxic[id] = struct{}{}
}

// takeToxic reports, once, whether task id was marked toxic.
func (h *redisHook) takeToxic(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.toxic[id]
	delete(h.toxic, id)
	return ok
}

// refusedPause is how long dequeues are refused here after Redis refused
// one (OOM, READONLY): asynq would otherwise ask again at once, in a loop.
const refusedPause = time.Second

// refuse notes that Redis refused a write now: no dequeue for
// refusedPause.
func (h *redisHook) refuse() { h.refusedUntil.Store(h.clock.Now().Add(refusedPause).UnixNano()) }

// refusing reports whether Redis refused a write less than refusedPause
// ago.
func (h *redisHook) refusing() bool { return h.clock.Now().UnixNano() < h.refusedUntil.Load() }

// canWrite reports whether a write is worth sending: the link is up and
// Redis has not refused one lately.
func (h *redisHook) canWrite() bool { return h.link.isUp() && !h.refusing() }

// gateClosed reports why a dequeue is refused without asking Redis, "" if
// it is not.
func (h *redisHook) gateClosed() string {
	switch {
	case h.paused.Load():
		return "worker paused"
	case h.closed.Load():
		return "backpressure"
	case !h.link.isUp():
		return "redis unreachable"
	case h.refusing():
		return "redis refuses writes"
	}
	return ""
}

// dequeue runs vigilDequeueScript with asynq's keys and arguments, once,
// and hands asynq the reply its own script would have given. A dequeue
// that gets no reply may have run: the task it took is active under this
// process but runs nowhere; the link goes down, and once Redis answers
// the stranded-task sweep (settle.go) puts it back. asynq sees an empty
// queue then (not an error: it would ask again at once).
func (h *redisHook) dequeue(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return next(ctx, cmd)
	}
	h.turn.Lock() // asynq calls from one goroutine: contended only by a give-back made outside a call
	defer h.turn.Unlock()
	if why := h.gateClosed(); why != "" {
		if why == "backpressure" || why == "worker paused" {
			if h.canWrite() {
				h.giveBack(ctx, next, false) // the worker takes no task: nor what it took ahead
			}
			h.metrics.DequeueSkips.Add(1)
			if h.onSkip != nil {
				h.onSkip()
			}
		}
		c.SetErr(redis.Nil)
		return redis.Nil
	}
	if !h.giveBackStale(ctx, next, false) {
		c.SetErr(redis.Nil) // refused: tried again at the next call
		return redis.Nil
	}
	if h.handOut(c) {
		if h.onTry != nil {
			h.onTry(true)
		}
		return nil
	}
	h.dq.RLock()
	defer h.dq.RUnlock()
	args := cmd.Args()
	// asynq's: evalsha sha 4 pending paused active lease expiry prefix
	sargs := []any{5}
	sargs = append(sargs, args[3:7]...)
	sargs = append(sargs, h.deadOwners)
	sargs = append(sargs, args[7:]...)
	sargs = append(sargs, ownerField, h.owner, h.jobPfx, health.JobCrashesSuffix, health.JobSoloCrashesSuffix, runField, h.want())
	start := h.clock.Now()
	// Sent once: after a lost reply a dequeue sent again would take a
	// second task (an outcome, outcome.go, is likewise sent once and kept
	// rather than repeated blindly).
	run, err := sendOnce(ctx, next, vigilDequeueScript, vigilDequeueSource, sargs)
	if h.onTry != nil {
		defer func() { h.onTry(c.Err() == nil) }()
	}
	h.observe("dequeue", start, err)
	if err != nil {
		if errors.Is(err, redis.Nil) {
			c.SetErr(redis.Nil)
			return redis.Nil
		}
		h.metrics.AcquireFailures.Add(1)
		switch faultOf(err) {
		case faultNoAnswer:
			h.metrics.DequeueNoAnswer.Add(1)
			c.SetErr(redis.Nil)
			return redis.Nil
		case faultRefused:
			h.refuse()
			c.SetErr(redis.Nil)
			return redis.Nil
		}
		c.SetErr(err)
		return err
	}
	res, _ := run.Val().([]any)
	first, ok := h.prefetched(res, start)
	if !ok {
		c.SetErr(redis.Nil)
		return redis.Nil
	}
	c.SetVal(first)
	return nil
}

// sendOnce runs script (source src) with args (numkeys, keys…, argv…)
// through send, once: by its SHA, and by its source if Redis does not
// have it (after a restart or a failover).
func sendOnce(ctx context.Context, send redis.ProcessHook, script *redis.Script, src string, args []any) (*redis.Cmd, error) {
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", script.Hash()}, args...)...)
	err := send(ctx, health.NoRetry{Cmd: cmd})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = redis.NewCmd(ctx, append([]any{"eval", src}, args...)...)
		err = send(ctx, health.NoRetry{Cmd: cmd})
	}
	return cmd, err
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}
