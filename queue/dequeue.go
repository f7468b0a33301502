package queue

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
// KEYS: pending, paused, active, lease (as asynq's). ARGV: lease expiry
// (Unix s), task key prefix (as asynq's), owner field, owner, job key
// prefix, crash counter suffix. Returns {msg, id, crashes} or nil.
const vigilDequeueSource = `
if redis.call("EXISTS", KEYS[2]) == 0 then
	local id = redis.call("RPOPLPUSH", KEYS[1], KEYS[3])
	if id then
		local key = ARGV[2] .. id
		redis.call("HSET", key, "state", "active", ARGV[3], ARGV[4])
		redis.call("HDEL", key, "pending_since")
		redis.call("ZADD", KEYS[4], ARGV[1], id)
		local n = redis.call("GET", ARGV[5] .. id .. ARGV[6])
		return {redis.call("HGET", key, "msg"), id, n or "0"}
	end
end
return nil`

var vigilDequeueScript = redis.NewScript(vigilDequeueSource)

// dequeueHook sits on the worker's Redis client and takes over asynq's
// dequeue of one queue:
//   - it runs vigilDequeueScript in place of asynq's script (the reply
//     asynq gets is the same);
//   - while the backpressure gate is closed it answers "nothing to
//     dequeue" without asking Redis, so that this process, and only it,
//     stops taking tasks (asynq's own queue pause is cluster-wide).
//
// A dequeue it does not recognize (another asynq version) goes through
// untouched, with one error logged: tasks then fall back to the running
// records and, at worst, to asynq's lease recovery.
type dequeueHook struct {
	pending string
	owner   string // "<component>:<pid>"
	jobPfx  string // health.Keys.JobPrefix(queue)
	log     *slog.Logger
	metrics *Metrics

	onSkip   func()         // tests: called when a dequeue is refused
	onTry    func(got bool) // tests: called after each dequeue
	closed   atomic.Bool    // backpressure: refuse dequeues
	warnOnce sync.Once

	mu      sync.Mutex
	crashes map[string]int // task id → crash count read at dequeue, until the middleware takes it
}

func newDequeueHook(keys health.Keys, id health.ComponentID, pid int, log *slog.Logger, m *Metrics) *dequeueHook {
	return &dequeueHook{
		pending: asynqPendingKey(id.Queue),
		owner:   ownerOf(id, pid),
		jobPfx:  keys.JobPrefix(id.Queue),
		log:     log,
		metrics: m,
	}
}

// ownerOf is the owner field's value for process pid of component id.
func ownerOf(id health.ComponentID, pid int) string { return id.String() + ":" + strconv.Itoa(pid) }

// maxCrashEntries bounds the crash counts kept for the middleware: a task
// asynq dequeues but never hands to the handler (its deadline passed)
// leaves its entry behind.
const maxCrashEntries = 10_000

// takeCrashes returns the crash count the dequeue of task id read, once.
func (h *dequeueHook) takeCrashes(id string) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.crashes[id]
	delete(h.crashes, id)
	return n, ok
}

func (h *dequeueHook) putCrashes(id string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashes == nil || len(h.crashes) >= maxCrashEntries {
		h.crashes = map[string]int{} // the middleware reads the counter itself then
	}
	h.crashes[id] = n
}

func (h *dequeueHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *dequeueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *dequeueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// EVALSHA sha 4 pending paused active lease expiry prefix
		if len(args) != 9 || args[3] != h.pending || !strings.EqualFold(cmd.Name(), "evalsha") {
			return next(ctx, cmd)
		}
		c, ok := cmd.(*redis.Cmd)
		if args[1] != asynqDequeueSHA || !ok {
			h.warnOnce.Do(func() {
				h.log.Error("asynq's dequeue script is not the one this build knows: dead workers' tasks come back only through asynq's lease recovery, and backpressure is off",
					"asynq_pinned", AsynqVersion)
			})
			return next(ctx, cmd)
		}
		if h.closed.Load() {
			h.metrics.DequeueSkips.Add(1)
			if h.onSkip != nil {
				h.onSkip()
			}
			c.SetErr(redis.Nil)
			return redis.Nil
		}
		return h.dequeue(ctx, c, args, next)
	}
}

// dequeue runs vigilDequeueScript with asynq's keys and arguments and hands
// asynq the reply its own script would have given.
func (h *dequeueHook) dequeue(ctx context.Context, c *redis.Cmd, args []any, next redis.ProcessHook) error {
	sargs := []any{"evalsha", vigilDequeueScript.Hash()}
	sargs = append(sargs, args[2:]...)
	sargs = append(sargs, ownerField, h.owner, h.jobPfx, health.JobCrashesSuffix)
	run := redis.NewCmd(ctx, sargs...)
	err := next(ctx, run)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		sargs[0], sargs[1] = "eval", vigilDequeueSource
		run = redis.NewCmd(ctx, sargs...)
		err = next(ctx, run)
	}
	if h.onTry != nil {
		defer func() { h.onTry(c.Err() == nil) }()
	}
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			h.metrics.AcquireFailures.Add(1)
		}
		c.SetErr(err)
		return err
	}
	res, _ := run.Val().([]any)
	if len(res) != 3 {
		c.SetErr(redis.Nil)
		return redis.Nil
	}
	id, _ := res[1].(string)
	n, _ := strconv.Atoi(asString(res[2]))
	h.putCrashes(id, n)
	c.SetVal(res[0])
	return nil
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
