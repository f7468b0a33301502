package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timing of the link's loop.
const (
	probeFirst    = 50 * time.Millisecond // the first probe after a command got no reply
	probeMax      = time.Second           // probes back off to this
	probeTimeout  = 3 * time.Second       // one probe (PING)
	keptRetry     = time.Second           // kept outcomes are tried again this often while Redis answers
	settleTimeout = 10 * time.Second
)

// logLink writes the line of a link transition and counts it.
func (w *worker) logLink(from, to linkState, ev linkEvent, cause error) {
	switch {
	case from == linkUp:
		w.metrics.RedisUnreachable.Add(1)
		w.log.Error("redis unreachable: this worker takes no task until it answers; running tasks go on, their outcomes are kept",
			"err", cause, "running", w.metrics.InflightJobs.Load())
	case to == linkDown:
		w.log.Warn("redis unreachable again while settling", "err", cause)
	}
}

// watchLink is the link's loop: while down it probes Redis, backing off
// from probeFirst to probeMax; once a probe is answered it settles, then
// lets dequeues through. While up it writes kept outcomes (Redis refused
// them, or a flush failed) every keptRetry. It returns when ctx ends.
func (w *worker) watchLink(ctx context.Context) {
	wait := probeFirst
	for {
		var next time.Duration
		switch w.link.current() {
		case linkDown:
			if err := w.probe(ctx); err == nil {
				w.link.fire(evProbeAnswered, nil)
				wait = probeFirst
				continue
			}
			next, wait = wait, min(2*wait, probeMax)
		case linkSettling:
			w.settle(ctx)
			continue
		case linkUp:
			wait = probeFirst
			if w.kept.len() > 0 {
				w.flushKept(ctx)
				next = keptRetry
			}
		}
		if !w.sleepLink(ctx, next) {
			return
		}
	}
}

// sleepLink waits d (0: until the link changes), or until the link changes
// or ctx ends; false when ctx ended.
func (w *worker) sleepLink(ctx context.Context, d time.Duration) bool {
	var timeout <-chan struct{}
	if d > 0 {
		ch := make(chan struct{})
		t := w.clock.AfterFunc(d, func() { close(ch) })
		defer t.Stop()
		timeout = ch
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.link.wake:
	case <-timeout:
	}
	return true
}

func (w *worker) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return w.rdb.Ping(ctx).Err()
}

// settle runs once Redis answers again after the link went down: it writes
// the kept outcomes, then requeues the tasks stranded under this process,
// then opens dequeuing. A step that gets no reply takes the link down
// again (and settling starts over after the next answered probe); a
// refusal (OOM, READONLY) does not stop it: the kept outcomes are tried
// again every keptRetry.
func (w *worker) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	since, cause := w.link.downSince()
	res, err := w.kept.flush(ctx, w.rdb)
	if err != nil && faultOf(err) == faultNoAnswer {
		w.link.fire(evSettleNoAnswer, err)
		return
	}
	if err != nil {
		w.log.Warn("kept outcomes not all written; tried again every second", "err", err)
	}
	n, err := w.requeueStranded(ctx)
	if err != nil {
		if faultOf(err) == faultNoAnswer {
			w.link.fire(evSettleNoAnswer, err)
			return
		}
		// A refusal: the sweep runs again at the next settle; the tasks
		// stay active under this live process meanwhile.
		w.log.Warn("stranded tasks not requeued", "err", err)
	}
	if _, _, moved := w.link.fire(evSettled, nil); moved {
		w.log.Info("redis reachable again: dequeuing resumes", "away", w.clock.Now().Sub(since).Round(time.Millisecond),
			"cause", errString(cause), "kept_written", res.written, "kept_stale", res.stale, "kept_left", res.left,
			"stranded_requeued", n)
	}
}

// flushKept writes the kept outcomes while the link is up.
func (w *worker) flushKept(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if _, err := w.kept.flush(ctx, w.rdb); err != nil {
		if allow, held := w.throttle.allow("kept", w.clock.Now()); allow {
			w.log.Warn("kept outcomes not written yet", "err", err, "kept", w.kept.len(), "lines_held_back", held)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// strandedScript requeues the tasks active under owner that the owner does
// not hold: a dequeue ran but its reply never reached the process (a lost
// reply, a reset connection). As the fast requeue (recover.go), it puts
// them at the front of pending, but counts nothing: no handler ran them.
//
// KEYS: active, lease, pending. ARGV: task key prefix, owner field, owner,
// pending_since (Unix ns), then the ids the owner holds. Returns the ids
// requeued.
var strandedScript = redis.NewScript(`
local held = {}
for i = 5, #ARGV do held[ARGV[i]] = true end
local out = {}
for _, id in ipairs(redis.call("LRANGE", KEYS[1], 0, -1)) do
	local key = ARGV[1] .. id
	if not held[id] and redis.call("HGET", key, ARGV[2]) == ARGV[3] and redis.call("HGET", key, "state") == "active"
		and redis.call("ZSCORE", KEYS[2], id) then
		redis.call("LREM", KEYS[1], 0, id)
		redis.call("ZREM", KEYS[2], id)
		redis.call("RPUSH", KEYS[3], id)
		redis.call("HSET", key, "state", "pending", "pending_since", ARGV[4])
		redis.call("HDEL", key, ARGV[2])
		out[#out+1] = id
	end
end
return out`)

// requeueStranded requeues the tasks active under this process that it
// neither runs nor keeps an outcome of. No dequeue runs meanwhile (one
// whose reply is on its way would look stranded).
func (w *worker) requeueStranded(ctx context.Context) (int, error) {
	w.hook.dq.Lock()
	now := w.clock.Now()
	argv := []any{asynqTaskPrefix(w.q), ownerField, w.hook.owner, now.UnixNano()}
	held, returning := w.hook.held.snapshot(now)
	for _, id := range held {
		argv = append(argv, id)
	}
	for _, id := range w.kept.ids() {
		argv = append(argv, id)
	}
	ids, err := strandedScript.Run(ctx, w.rdb, []string{asynqActiveKey(w.q), asynqLeaseKey(w.q), asynqPendingKey(w.q)}, argv...).StringSlice()
	if err == nil {
		w.hook.held.swept(returning)
	}
	w.hook.dq.Unlock()
	if err != nil {
		return 0, fmt.Errorf("requeue stranded tasks of %s: %w", w.hook.owner, err)
	}
	for _, id := range ids {
		w.metrics.StrandedRequeued.Add(1)
		w.log.Warn("requeued a task stranded under this worker (its dequeue's reply was lost): no attempt counted",
			slog.String("task", id))
		w.write(ctx, &job{id: id}, string(StateRequeuedStranded), func(ctx context.Context, pipe redis.Pipeliner) {
			jobEvents(ctx, w.store, pipe, now, JobEvent{Queue: w.q, ID: id, State: StateRequeuedStranded,
				Component: w.id.String(), PID: w.pid})
		})
	}
	return len(ids), nil
}
