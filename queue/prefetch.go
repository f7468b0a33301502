package queue

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Prefetch. asynq dequeues one task per round trip, from one goroutine,
// after taking one of its concurrency tokens: with short tasks a worker's
// throughput is one task per dequeue round trip (BenchmarkThroughput
// measures it). The hook's dequeue therefore takes, in the same script
// call, as many tasks as this process has free handler slots (the
// concurrency less the tasks it holds), up to maxPrefetch, hands asynq the
// first and keeps the others here; the next calls asynq makes (it makes
// them at once while it has free tokens) are answered from here without
// asking Redis (TestPrefetch).
//
// A worker whose tasks are short takes more: as many past its free slots
// as its slots get through in aheadBudget at the mean time a slot takes
// per task (beyond), at most aheadRounds rounds of them. With free slots
// alone a worker whose slots free one at a time takes one task per round
// trip again; past them, a task is expected to wait here about
// aheadBudget for a slot, where it would otherwise wait in pending for the
// next dequeue. That is a prediction from the mean of every task type the
// worker runs, not a bound: tasks longer than the mean said keep it here
// until prefetchFresh has passed and the idle check (at most a second
// later) or asynq's next call gives it back. A worker whose tasks take
// longer than aheadBudget per slot takes none past its slots, and one that
// has finished no task yet neither.
//
// A prefetched task is as a dequeued one in every respect that recovery
// sees: active in asynq with a lease, the owner field naming this process,
// its run token taken, held (held.go; the stranded-task sweep leaves it),
// and no running record (its handler has not begun: a crash now counts
// nothing against it). The process's death puts it back through the
// supervisor's owner-scoped requeue, as any task it held.
//
// It waits here while asynq makes no dequeue call (every slot busy: a task
// taken past the free slots, or a task taken during the stop), or while
// the gate is closed, and it is handed out only within prefetchFresh of
// its dequeue; else it is given back, to the front of pending in its
// order, by giveBackScript, which checks that it is still active under
// this process:
//   - every slot busy past prefetchFresh (tasks longer than the mean said):
//     given back by the worker's idle check, every second (giveBackIdle),
//     or at the next call asynq makes, whichever is first;
//   - paused or backpressure (the worker takes no task): given back at the
//     next dequeue call asynq makes (asynq keeps calling, every
//     TaskCheckInterval);
//   - Redis unreachable or refusing writes: kept (a give-back could not be
//     written); once the gate opens, given back if it waited past
//     prefetchFresh: meanwhile this host may have lost its slots and
//     another recovered the process's tasks, and a task taken ahead has
//     not begun, so it must not begin now (it may run elsewhere);
//   - the worker stopping: given back once asynq's shutdown returned
//     (giveBackPrefetched), or sooner by the idle check if it waited past
//     prefetchFresh meanwhile; one that cannot be is requeued by the
//     supervisor after the process exits. Not sooner: a dequeue refused
//     during the stop would make asynq's processor sleep its
//     TaskCheckInterval holding a token, and its shutdown wait for that
//     (up to 1.5 s by default), where it would have taken the task; the
//     tasks taken ahead wait at most the shutdown timeout, active and
//     owned.
//
// A give-back never overlaps a dequeue call of asynq's (the hook's turn
// lock): a dequeue may take again a task just given back, and the
// give-back's bookkeeping, keyed by task id, would undo the new hold: the
// task would run unheld, and the next stranded-task sweep would requeue it
// under its handler (TestPrefetchGiveBackNeverOverlapsADequeue).
//
// A give-back that got no reply may have run: its tasks are dropped from
// here, so that they are never handed out (another worker may already run
// them), and marked returning in the held set (held.go), and the link goes
// down; once Redis answers, the stranded-task sweep puts back those still
// active under this process (asynq's lease recovery leaves them meanwhile).

// maxPrefetch bounds the tasks one dequeue takes.
const maxPrefetch = 32

// prefetchFresh is how long after its dequeue a task taken ahead may be
// handed out. asynq asks again at once while it has free tokens (within
// microseconds, or a scheduling delay on a loaded machine); a task waits
// longer while the gate is closed, or while every slot is busy (taken past
// the free slots).
const prefetchFresh = time.Second

// prefetchedTask is one task a dequeue took for a later call of asynq's.
type prefetchedTask struct {
	msg any // the task message, as the script returned it
	id  string
	at  time.Time // when its dequeue was sent
}

// prefetch holds the tasks taken ahead. Safe for concurrent use.
type prefetch struct {
	mu    sync.Mutex
	tasks []prefetchedTask // in the order taken: the first is handed out first
}

func (p *prefetch) put(ts []prefetchedTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks = append(p.tasks, ts...)
}

// pop hands out the first task taken ahead.
func (p *prefetch) pop() (prefetchedTask, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tasks) == 0 {
		return prefetchedTask{}, false
	}
	t := p.tasks[0]
	p.tasks[0] = prefetchedTask{}
	p.tasks = p.tasks[1:]
	return t, true
}

// take empties the prefetch and returns what it held, in order.
func (p *prefetch) take() []prefetchedTask {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.tasks
	p.tasks = nil
	return ts
}

// stale reports whether a task held was taken before cutoff (one dequeue
// took them all, the first is the oldest).
func (p *prefetch) stale(cutoff time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tasks) > 0 && p.tasks[0].at.Before(cutoff)
}

func (p *prefetch) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tasks)
}

// aheadBudget bounds how long a task taken past the free handler slots
// waits here for one, as the mean time a slot takes per task predicts:
// short beside the next dequeue round trip it saves under load, and far
// below prefetchFresh.
const aheadBudget = 5 * time.Millisecond

// aheadRounds bounds the tasks taken past the free slots, in rounds of
// the concurrency.
const aheadRounds = 3

// want is how many tasks the next dequeue from Redis should take: one per
// handler slot that no held task fills (asynq's call holds one of them),
// and beyond() more.
func (h *redisHook) want() int {
	return max(1, min(maxPrefetch, h.slots+h.beyond()-h.held.count()))
}

// beyond is how many tasks to take past the free handler slots: as many as
// the slots get through in aheadBudget at the mean time a slot takes per
// task (the k-th past them waits about k/slots of that), at most
// aheadRounds×slots; none until a task has been timed.
func (h *redisHook) beyond() int {
	c := h.cycle.Load()
	if c <= 0 {
		return 0
	}
	return int(min(int64(aheadRounds*h.slots), int64(h.slots)*int64(aheadBudget)/c))
}

// ran folds how long a handler slot took for one task (the middleware's
// whole call) into the mean beyond uses: an exponential moving average,
// weight 1/8. A zero (a clock that did not move) is no sample.
func (h *redisHook) ran(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		old := h.cycle.Load()
		v := int64(d)
		if old > 0 {
			v = old + (int64(d)-old)/8
		}
		if h.cycle.CompareAndSwap(old, max(v, 1)) {
			return
		}
	}
}

// giveBackScript puts tasks a dequeue took ahead back at the front of
// pending, in their order (the first taken is the next to be dequeued),
// each only if it is still active under this owner. No attempt counted, no
// event: to everyone else the task was never taken.
//
// KEYS: active, lease, pending. ARGV: task key prefix, owner field, owner,
// pending_since (Unix ns), then the ids in the order taken. Returns the
// number put back.
var giveBackScript = redis.NewScript(giveBackSource)

const giveBackSource = `
local n = 0
for i = #ARGV, 5, -1 do
	local id = ARGV[i]
	local key = ARGV[1] .. id
	if redis.call("HGET", key, ARGV[2]) == ARGV[3] and redis.call("HGET", key, "state") == "active"
		and redis.call("LREM", KEYS[1], 0, id) > 0 then
		redis.call("ZREM", KEYS[2], id)
		redis.call("RPUSH", KEYS[3], id)
		redis.call("HSET", key, "state", "pending", "pending_since", ARGV[4])
		redis.call("HDEL", key, ARGV[2])
		n = n + 1
	end
end
return n`

// giveBack puts the prefetched tasks back in pending (see prefetch) through
// send (the hook's next, or the client itself: observed is true when that
// already observes the reply). On a refusal they stay prefetched, for the
// next call; with no reply they are dropped (the link goes down, and the
// stranded-task sweep requeues them).
func (h *redisHook) giveBack(ctx context.Context, send redis.ProcessHook, observed bool) (given int64) {
	// The stranded-task sweep must not run between the give-back going
	// unanswered (the link goes down, and Redis may answer the probe at
	// once) and its tasks being marked returning: it would take them
	// for held, and no later sweep would come.
	h.dq.RLock()
	defer h.dq.RUnlock()
	ts := h.ahead.take()
	if len(ts) == 0 {
		return 0
	}
	argv := []any{asynqTaskPrefix(h.q), ownerField, h.owner, h.clock.Now().UnixNano()}
	for _, t := range ts {
		argv = append(argv, t.id)
	}
	args := append([]any{3, h.active, h.lease, h.pending}, argv...)
	start := h.clock.Now()
	cmd, err := sendOnce(ctx, send, giveBackScript, giveBackSource, args)
	if !observed {
		h.observe("give back", start, err)
	}
	switch f := faultOf(err); {
	case err == nil:
		given, _ = cmd.Val().(int64) // those still this process's: the others were recovered meanwhile
		h.metrics.PrefetchGivenBack.Add(given)
	case f == faultRefused:
		// Not run: the next call tries again. Redis refuses writes: no
		// dequeue until refusedPause has passed, as after a refused one.
		h.ahead.put(ts)
		h.refuse()
		return 0
	default:
		// It may have run: the tasks may be pending again, taken by
		// another worker already, so they are never handed out here.
		// Those it did not put back are active under this process, run
		// by no one: the sweep requeues them once the link has been down
		// and Redis answers again (returning: asynq's lease recovery
		// leaves them meanwhile).
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.id
			h.takeCrashes(t.id)
		}
		h.held.returning(ids, h.clock.Now())
		if f != faultNoAnswer { // observe fired it for no reply
			h.link.fire(evNoAnswer, err)
		}
		h.log.Warn("prefetched tasks' give-back failed: requeued as stranded once redis answers", "tasks", len(ts), "err", err)
		return 0
	}
	for _, t := range ts {
		h.held.resolve(t.id)
		h.takeCrashes(t.id)
	}
	return given
}

// giveBackStale gives back the tasks taken ahead if they waited past
// prefetchFresh (the gate was closed, or every handler slot busy), through
// send (observed: see giveBack), and reports whether none such is left
// (false: Redis refused the give-back; no task may be taken until it is
// written).
func (h *redisHook) giveBackStale(ctx context.Context, send redis.ProcessHook, observed bool) bool {
	if !h.ahead.stale(h.clock.Now().Add(-prefetchFresh)) {
		return true
	}
	if n := h.giveBack(ctx, send, observed); n > 0 {
		h.log.Info("tasks taken ahead waited past their freshness: given back", "tasks", n)
	}
	return h.ahead.len() == 0
}

// giveBackIdle gives back the tasks taken ahead that waited past
// prefetchFresh while asynq made no dequeue call (every handler slot busy,
// with tasks longer than the mean promised), through send, the client
// itself. The worker calls it every second; the next dequeue call does the
// same (giveBackStale). Not while Redis is away or refusing: the tasks are
// active and owned meanwhile, and given back once it answers.
func (h *redisHook) giveBackIdle(ctx context.Context, send redis.ProcessHook) {
	if !h.turn.TryLock() {
		return // asynq is in a dequeue call, which gives back what is stale itself
	}
	defer h.turn.Unlock()
	if h.canWrite() {
		h.giveBackStale(ctx, send, true)
	}
}

// handOut answers a dequeue call of asynq's from the prefetch, if it holds
// a task.
func (h *redisHook) handOut(c *redis.Cmd) bool {
	t, ok := h.ahead.pop()
	if !ok {
		return false
	}
	c.SetVal(t.msg)
	return true
}

// giveBackPrefetched gives back what is still prefetched as the worker
// stops, after asynq's shutdown returned (no dequeue call comes any more).
// What it cannot give back is requeued by the supervisor once the process
// is gone.
func (w *worker) giveBackPrefetched() {
	if w.hook.ahead.len() == 0 || !w.link.isUp() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	w.hook.turn.Lock() // an idle check may be giving back meanwhile
	defer w.hook.turn.Unlock()
	w.hook.giveBack(ctx, w.throughHook, true)
}

// throughHook sends cmd through this worker's client, and so through the
// hook, which observes it.
func (w *worker) throughHook(ctx context.Context, cmd redis.Cmder) error {
	return w.rdb.Process(ctx, cmd)
}

// giveBackIdle is the hook's giveBackIdle through this worker's client.
func (w *worker) giveBackIdle() {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	w.hook.giveBackIdle(ctx, w.throughHook)
}

// prefetched parses the dequeue script's reply: the first task is asynq's,
// the others are kept. Every task is held from here on.
//
// sent is when the dequeue was sent: a task's freshness counts from then (a
// reply held in transit does not make it younger).
func (h *redisHook) prefetched(res []any, sent time.Time) (first any, ok bool) {
	var ahead []prefetchedTask
	now := h.clock.Now()
	for i := 0; i+4 < len(res); i += 5 {
		id, _ := res[i+1].(string)
		var cr crashRecord
		cr.all, _ = strconv.Atoi(asString(res[i+2]))
		cr.solo, _ = strconv.Atoi(asString(res[i+3]))
		token, _ := res[i+4].(int64)
		h.held.dequeued(id, token, now)
		h.putCrashes(id, cr)
		if i == 0 {
			first, ok = res[i], true
			continue
		}
		ahead = append(ahead, prefetchedTask{msg: res[i], id: id, at: sent})
	}
	if len(ahead) > 0 {
		h.ahead.put(ahead)
		h.metrics.Prefetched.Add(int64(len(ahead)))
	}
	return first, ok
}
