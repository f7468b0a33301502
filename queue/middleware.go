package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// process is the handler asynq calls for every task: the middleware of
// DESIGN.md §6 around the pool's handlers.
//
//  1. Crash accounting: a task whose crash counter is above
//     job_crash_retries is not run but archived, "toxic: worker crashed N
//     times", event toxic.
//  2. The task is recorded in the worker's running hash, event processing.
//  3. The handler runs, with the pool's task timeout, in a goroutine of its
//     own: a handler that ignores its context does not hold the outcome up.
//  4. The outcome: done (rolling average updated, crash counter dropped,
//     scratch removed) or error, classified (retried, RETRIES_EXHAUSTED,
//     NON_RETRYABLE, NO_HANDLER), or aborted:shutdown; the running entry
//     goes, in one round trip with the event.
func (w *worker) process(ctx context.Context, t *asynq.Task) error {
	w.inflight.Add(1)
	defer w.inflight.Done()
	w.metrics.InflightJobs.Add(1)
	defer w.metrics.InflightJobs.Add(-1)

	id, _ := asynq.GetTaskID(ctx)
	start := w.clock.Now()
	j := &job{w: w, queue: w.q, id: id, typ: t.Type(), start: start, thr: newThrottle(start)}
	j.retried, _ = asynq.GetRetryCount(ctx)
	j.maxRetry, _ = asynq.GetMaxRetry(ctx)
	j.crashes = w.crashCount(ctx, id)

	if j.crashes > w.env.JobCrashRetries {
		return w.toxic(ctx, j)
	}
	w.begin(ctx, j)
	var err error
	if h, ok := w.handlers[t.Type()]; ok {
		err = w.run(ctx, j, h, t)
	} else {
		err = &jobError{code: CodeNoHandler, err: fmt.Errorf("no handler for task type %q in queue %q", t.Type(), w.q), skip: true}
	}
	return w.finish(ctx, j, err)
}

// crashCount is the task's crash counter as its dequeue read it (or, for a
// dequeue the hook did not see, as stored now).
func (w *worker) crashCount(ctx context.Context, id string) int {
	if n, ok := w.hook.takeCrashes(id); ok {
		return n
	}
	octx, cancel := opCtx(ctx)
	defer cancel()
	v, err := w.rdb.Get(octx, w.store.Keys().JobCrashes(w.q, id)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		w.log.Warn("read crash counter", "task", id, "err", err)
	}
	n, _ := strconv.Atoi(v)
	return n
}

func (w *worker) event(j *job, state JobState) JobEvent {
	return JobEvent{Queue: j.queue, ID: j.id, Type: j.typ, State: state, Retried: j.retried, MaxRetry: j.maxRetry,
		Crashes: j.crashes, Component: w.id.String(), PID: w.pid}
}

// toxic archives a task that crashed its worker too often, without
// running it: asynq archives on the SkipRetry the error carries, with the
// error's text as LastErr.
func (w *worker) toxic(ctx context.Context, j *job) error {
	terr := toxicError(j.crashes)
	w.metrics.ToxicJobs.Add(1)
	w.log.Error("toxic task archived without running", "task", j.id, "type", j.typ, "crashes", j.crashes,
		"job_crash_retries", w.env.JobCrashRetries)
	ev := w.event(j, StateToxic)
	ev.Error, ev.Final = terr.Error(), true
	w.write(ctx, j, "toxic", func(ctx context.Context, pipe redis.Pipeliner) {
		jobEvents(ctx, w.store, pipe, w.clock.Now(), ev)
	})
	return terr
}

// begin records the task as running and announces it.
func (w *worker) begin(ctx context.Context, j *job) {
	w.write(ctx, j, "processing", func(ctx context.Context, pipe redis.Pipeliner) {
		pipe.HSet(ctx, w.store.Keys().Running(w.id), j.id, runningValue(w.pid, j.start))
		jobEvents(ctx, w.store, pipe, j.start, w.event(j, StateProcessing))
	})
}

// write runs one pipelined bookkeeping round trip; a failure costs only the
// record (the task goes on), so it is logged.
func (w *worker) write(ctx context.Context, j *job, what string, fill func(context.Context, redis.Pipeliner)) {
	octx, cancel := opCtx(ctx)
	defer cancel()
	pipe := w.rdb.Pipeline()
	fill(octx, pipe)
	if _, err := pipe.Exec(octx); err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = avgScript.Load(octx, w.rdb).Err()
		}
		w.log.Warn("record task "+what, "task", j.id, "err", err)
	}
}

// run calls the handler. It returns when the handler does, or when the
// task's context ends (asynq's deadline, its shutdown abort, a cancel, or
// the pool's task timeout), whichever is first.
func (w *worker) run(ctx context.Context, j *job, h asynq.Handler, t *asynq.Task) error {
	hctx := context.WithValue(ctx, jobKey{}, j)
	if w.env.TaskTimeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(hctx, w.env.TaskTimeout)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if x := recover(); x != nil {
				w.log.Error("handler panicked", "task", j.id, "type", j.typ, "panic", fmt.Sprint(x), "stack", string(debug.Stack()))
				done <- fmt.Errorf("panic: %v", x)
			}
		}()
		done <- h.ProcessTask(hctx, t)
	}()
	select {
	case err := <-done:
		return err
	case <-hctx.Done():
		select {
		case err := <-done: // finished at the same moment: its result wins
			return err
		default:
		}
		return hctx.Err()
	}
}

// finish writes the task's outcome and returns what asynq must see.
func (w *worker) finish(ctx context.Context, j *job, err error) error {
	end := w.clock.Now()
	j.mu.Lock()
	j.finished = true
	scratch := j.scratch
	j.mu.Unlock()
	dur := end.Sub(j.start)
	ev := w.event(j, StateDone)
	ev.DurationMS = dur.Milliseconds()
	ret := err
	// During a shutdown, a task whose context asynq cancelled is one it gave
	// up on and put back, whatever the handler answered (a normal outcome
	// is written before asynq cancels). A cancel or a lost lease in those
	// same seconds is reported as an abort too: asynq retries those.
	aborted := w.shuttingDown.Load() && errors.Is(ctx.Err(), context.Canceled)
	ok := err == nil && !aborted
	switch {
	case aborted:
		ev.State = StateAbortedShutdown
		if err != nil {
			ev.Error = err.Error()
		}
		w.metrics.AbortedOnShutdown.Add(1)
		w.log.Warn("task aborted by shutdown: requeued", "task", j.id, "type", j.typ, "ran", dur)
	case err == nil:
		w.metrics.JobsDone.Add(1)
	default:
		ret = classify(j, err)
		ev.State, ev.Error = StateError, err.Error()
		var je *jobError
		if errors.As(ret, &je) {
			ev.Code = je.code
		}
		ev.Final = ev.Code != ""
		w.metrics.JobsFailed.Add(1)
		if ev.Code == CodeRetriesExhausted {
			w.metrics.RetriesExhausted.Add(1)
		}
		w.log.Warn("task failed", "task", j.id, "type", j.typ, "retried", j.retried, "max_retry", j.maxRetry,
			"code", ev.Code, "err", err)
	}
	w.cleanScratch(j, scratch, ok)
	keys := w.store.Keys()
	w.write(ctx, j, string(ev.State), func(ctx context.Context, pipe redis.Pipeliner) {
		pipe.HDel(ctx, keys.Running(w.id), j.id)
		if ok {
			// Loaded at start; after a Redis restart lost it, the first
			// failure reloads it (that one duration is lost).
			avgScript.EvalSha(ctx, pipe, []string{keys.QueueStats(w.q)}, dur.Seconds()*1000, avgWeight)
			if j.crashes > 0 {
				pipe.Del(ctx, keys.JobCrashes(w.q, j.id))
			}
		}
		jobEvents(ctx, w.store, pipe, end, ev)
	})
	return ret
}

// classify gives a handler error the code and retry decision of DESIGN.md
// §6. Errors of a final failure carry the code in their text, which asynq
// keeps as the archived task's LastErr.
func classify(j *job, err error) error {
	var je *jobError
	switch {
	case errors.As(err, &je):
		return err
	case errors.Is(err, asynq.RevokeTask):
		return &jobError{code: CodeRevoked, err: err}
	case errors.Is(err, ErrNonRetryable), errors.Is(err, asynq.SkipRetry):
		return &jobError{code: CodeNonRetryable, err: err, skip: true}
	case j.retried >= j.maxRetry:
		return &jobError{code: CodeRetriesExhausted, err: err}
	}
	return err
}

// avgWeight is the smallest weight of a new duration in the rolling
// average: it is the plain mean of the first 1/avgWeight jobs, then an
// exponentially weighted one.
const avgWeight = 0.05

// avgScript folds one job's duration into the queue's rolling average.
// KEYS: the queue stats hash. ARGV: duration ms, minimum weight.
var avgScript = redis.NewScript(`
local n = redis.call("HINCRBY", KEYS[1], "jobs", 1)
local d = tonumber(ARGV[1])
local avg = tonumber(redis.call("HGET", KEYS[1], "avg_ms") or d)
local a = math.max(1 / n, tonumber(ARGV[2]))
avg = avg + a * (d - avg)
redis.call("HSET", KEYS[1], "avg_ms", string.format("%.3f", avg))
return 1`)
