package queue

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// redisHook sits on the worker's Redis client. It sees every command, and
// takes over asynq's calls on the worker's queue that decide where a task
// is:
//
//   - the dequeue (dequeue.go): Vigil's script in place of asynq's (the
//     owner field and the crash counter in the same step), never retried by
//     go-redis (a lost reply would run it twice), refused without asking
//     Redis while backpressure holds, while the link is not up, or for a
//     moment after Redis refused a write;
//   - the outcome writes (done, complete, retry, archive, requeue): never
//     retried blindly either; one Redis did not acknowledge is kept
//     (kept.go) and asynq told it succeeded; the archive of a task given
//     the toxic verdict is sent as toxicArchive, which deletes its crash
//     counters with it (outcome.go);
//   - asynq's lease extension (leases.go): answered here while Redis is
//     away, so that asynq does not cancel the running tasks;
//   - asynq's recoverer's list of expired leases (leases.go): the tasks of
//     live processes are left out.
//
// For every command it watches for faults (faults.go): no reply takes the
// link down (link.go), a refusal and a slow reply are logged and counted.
//
// A call it does not recognize (another asynq version) goes through
// untouched, with one error logged: tasks then fall back to the running
// records and, at worst, to asynq's lease recovery.
type redisHook struct {
	q, owner   string
	pending    string // asynq's keys of q
	active     string
	lease      string
	jobPfx     string // health.Keys.JobPrefix(q)
	deadOwners string // health.Keys.DeadOwners(q)
	log        *slog.Logger
	metrics    *Metrics
	clock      clock.Clock
	link       *link
	held       holdings
	ahead      prefetch     // tasks a dequeue took for asynq's next calls (prefetch.go)
	slots      int          // asynq's concurrency
	cycle      atomic.Int64 // mean time a handler slot takes per task, ns (0: none seen yet; see beyond)
	kept       *keptOutcomes
	throttle   *throttledLog
	records    func(context.Context, []health.ComponentID) ([]health.Component, error)

	handBack func(id string) bool // asked before asynq's shutdown requeue is written (handback.go)
	stuck    func(id string) bool // asked before a retry or an archive is written (stuckGrace)
	onSkip   func()               // tests: called when a dequeue is refused
	onTry    func(got bool)       // tests: called after each dequeue
	closed   atomic.Bool          // backpressure: refuse dequeues
	paused   atomic.Bool          // an operator paused this worker: refuse dequeues
	warnOnce sync.Once

	// dq is held (read) by every dequeue for its whole call, and (write) by
	// the stranded-task sweep, which must not see a dequeue half done.
	dq sync.RWMutex
	// turn is held by asynq's dequeue call for its whole length, and by a
	// give-back made outside one (giveBackIdle, giveBackPrefetched): a
	// give-back never overlaps a dequeue, whose reply may take a task the
	// give-back just put back (the give-back's bookkeeping, keyed by task
	// id, would then undo the new dequeue's hold), and tasks a refused
	// give-back keeps are never handed out unchecked meanwhile
	// (TestPrefetchGiveBackNeverOverlapsADequeue).
	turn sync.Mutex

	refusedUntil atomic.Int64 // Unix ns: dequeues refused until then after Redis refused one

	conns connSet // every connection of the client, severed by a shutdown past its bound

	mu      sync.Mutex
	crashes map[string]crashRecord // task id → crash counters read at dequeue, until the middleware takes them
	toxic   map[string]struct{}    // task ids given the toxic verdict, until their outcome is written (outcome.go)
}

func newRedisHook(keys health.Keys, id health.ComponentID, pid int, log *slog.Logger, m *Metrics, c clock.Clock,
	l *link, kept *keptOutcomes, throttle *throttledLog) *redisHook {
	q := id.Queue
	return &redisHook{
		q: q, owner: ownerOf(id, pid),
		pending: asynqPendingKey(q), active: asynqActiveKey(q), lease: asynqLeaseKey(q),
		jobPfx: keys.JobPrefix(q), deadOwners: keys.DeadOwners(q), log: log, metrics: m, clock: c, link: l, kept: kept, throttle: throttle,
	}
}

func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return h.conns.dial(ctx, network, addr, next)
	}
}

func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.conns.refusal(); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		start := h.clock.Now()
		err := next(ctx, cmds)
		h.observe("pipeline", start, err)
		return err
	}
}

func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.conns.refusal(); err != nil {
			cmd.SetErr(err) // not even tried: go-redis would dial and retry for seconds
			return err
		}
		start := h.clock.Now()
		var err error
		switch op := h.recognize(cmd); op {
		case opDequeue:
			err = h.dequeue(ctx, cmd, next)
		case opOutcome:
			err = h.outcome(ctx, cmd, next)
		case opExtendLease:
			err = h.extendLease(ctx, cmd, next)
		case opListLeaseExpired:
			err = h.listLeaseExpired(ctx, cmd, next)
		default:
			err = next(ctx, cmd)
			h.observe(cmd.Name(), start, err)
		}
		return err
	}
}

// hookOp is an asynq call the hook takes over.
type hookOp int

const (
	opOther hookOp = iota
	opDequeue
	opOutcome
	opExtendLease
	opListLeaseExpired
)

// recognize says which asynq call on this worker's queue cmd is.
func (h *redisHook) recognize(cmd redis.Cmder) hookOp {
	args := cmd.Args()
	name := cmd.Name()
	if strings.EqualFold(name, "zadd") {
		// ZAddXX of asynq's heartbeater: zadd lease xx score id …
		if len(args) >= 5 && args[1] == h.lease && args[2] == "xx" {
			return opExtendLease
		}
		return opOther
	}
	sha := scriptSHA(name, args)
	if sha == "" {
		return opOther
	}
	switch {
	case len(args) == 9 && args[3] == h.pending: // EVALSHA sha 4 pending paused active lease expiry prefix
		if sha != asynqDequeueSHA {
			h.warnOnce.Do(func() {
				h.log.Error("asynq's dequeue script is not the one this build knows: dead workers' tasks come back only through asynq's lease recovery, and backpressure is off",
					"asynq_pinned", AsynqVersion)
			})
			return opOther
		}
		return opDequeue
	case sha == asynqListLeaseExpiredSHA && len(args) == 6 && args[3] == h.lease:
		return opListLeaseExpired
	}
	if s := outcomeScripts[sha]; s != nil && h.onQueue(args) {
		return opOutcome
	}
	return opOther
}

// onQueue reports whether a script call's keys include this queue's active
// list (every outcome script's do).
func (h *redisHook) onQueue(args []any) bool {
	n, ok := args[2].(int)
	if !ok || 3+n > len(args) {
		return false
	}
	for _, k := range args[3 : 3+n] {
		if k == h.active {
			return true
		}
	}
	return false
}

// observe counts a slow reply, and acts on a fault, of a command the hook
// passed through.
func (h *redisHook) observe(what string, start time.Time, err error) {
	f := faultOf(err)
	now := h.clock.Now()
	if d := now.Sub(start); d >= slowReply && f != faultNoAnswer {
		h.metrics.RedisSlowReplies.Add(1)
		if ok, held := h.throttle.allow("slow", now); ok {
			h.log.Warn("redis answers slowly", "command", what, "took", d.Round(time.Millisecond), "slow_over", slowReply,
				"lines_held_back", held)
		}
	}
	switch f {
	case faultNoAnswer:
		h.link.fire(evNoAnswer, err)
	case faultRefused:
		h.refused(what, err)
	}
}

// refused logs and counts a refusal (OOM, READONLY, …).
func (h *redisHook) refused(what string, err error) {
	kind := refusedKind(err)
	h.metrics.countRefused(kind)
	if ok, held := h.throttle.allow("refused:"+kind, h.clock.Now()); ok {
		h.log.Error("redis refuses the worker's writes ("+kind+"): no task is taken while it does; outcomes are kept and written once it accepts them",
			"command", what, "err", err, "lines_held_back", held)
	}
}
