package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// process is the handler asynq calls for every task: the middleware of
// docs/design.md §6 around the pool's handlers.
//
//  1. Crash accounting: a task whose crash counter is above
//     job_crash_retries is not run but archived, "toxic: worker crashed N
//     times", event toxic.
//  2. The task is recorded in the worker's running hash, event processing.
//  3. The handler runs, with its timeout (TimeoutOf), in a goroutine of its
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
	entered := w.clock.Now()
	// asynq writes the outcome once this returns: until it has, the task
	// is not stranded (see holdings).
	defer func() {
		now := w.clock.Now()
		w.hook.held.returned(id, now)
		w.hook.ran(now.Sub(entered)) // how many tasks the next dequeue takes (prefetch.go)
	}()
	hr, ok := w.runs.enter(id)
	if !ok {
		return context.Canceled // handed back by asynq's shutdown before it got here
	}
	defer w.runs.leave(id, hr)
	start := w.clock.Now()
	j := &job{w: w, queue: w.q, id: id, typ: t.Type(), start: start, thr: newThrottle(start), run: hr}
	j.retried, _ = asynq.GetRetryCount(ctx)
	j.maxRetry, _ = asynq.GetMaxRetry(ctx)
	cr := w.crashCount(ctx, id)
	j.crashes = cr.all

	// Toxic only past the limit with a crash of its own (it ran alone);
	// one past the limit whose crashes all came with neighbours in flight
	// runs alone once more first (gate.go): a neighbour's crash never makes
	// a task toxic (TestSharedCrashesAloneAreNotToxic,
	// TestToxicJobSparesItsNeighbour).
	if j.crashes > w.env.JobCrashRetries && cr.solo > 0 {
		return w.toxic(ctx, j)
	}
	release, err := w.gate.enter(ctx, j.crashes > 0)
	if err != nil {
		return err // asynq gave up on it (its shutdown) before its handler began
	}
	defer func() {
		if w.runs.inside(hr) {
			// Its handler is still running (stuck, or given up on by
			// asynq's shutdown): no other handler begins in this process
			// until it returns, which may be only the process's end. A
			// task waiting to run alone would run beside it otherwise, and
			// the crash the exit counts would be held against both as
			// neighbours, and a toxic task would run once more than
			// job_crash_retries allows (TestStuckHandlerKeepsItsNeighboursOut).
			go func() {
				<-j.run.returned
				release()
			}()
			return
		}
		release()
	}()
	if w.runs.handedBack(hr) {
		return context.Canceled // handed back by asynq's shutdown while it waited
	}
	if !w.begin(ctx, j) {
		// Not on record: the handler does not begin (see begin). asynq gave up
		// on the task meanwhile (its deadline, its shutdown), or Redis was
		// away so long that the record was dropped.
		err := ctx.Err()
		if err == nil {
			err = errNotRecorded
		}
		return w.finish(ctx, j, err)
	}
	if names := w.declared[t.Type()]; len(names) > 0 && w.allPublished(ctx, id, names) {
		// An earlier run published everything this task makes, and then
		// died or lost its outcome: done, without running it again.
		j.shortCircuit = true
		w.metrics.ShortCircuits.Add(1)
		w.log.Info("task done without running: its declared outputs exist", "task", id, "type", t.Type(), "outputs", names)
	} else if h, ok := w.handlers[t.Type()]; ok {
		err = w.run(ctx, j, h, t)
	} else {
		// Retried per the task's MaxRetry like any error, archived when
		// they run out, as asynq does: in a rolling deploy a new task
		// type may reach a worker that does not know it yet.
		err = &jobError{code: CodeNoHandler, err: fmt.Errorf("no handler for task type %q in queue %q", t.Type(), w.q),
			retrying: j.retried < j.maxRetry}
	}
	return w.finish(ctx, j, err)
}

// crashCount is the task's crash counters as its dequeue read them (or,
// for a dequeue the hook did not see, as stored now).
func (w *worker) crashCount(ctx context.Context, id string) crashRecord {
	if n, ok := w.hook.takeCrashes(id); ok {
		return n
	}
	octx, cancel := opCtx(ctx)
	defer cancel()
	keys := w.store.Keys()
	vs, err := w.rdb.MGet(octx, keys.JobCrashes(w.q, id), keys.JobSoloCrashes(w.q, id)).Result()
	if err != nil {
		w.log.Warn("read crash counters", "task", id, "err", err)
		return crashRecord{}
	}
	var cr crashRecord
	if s, ok := vs[0].(string); ok {
		cr.all, _ = strconv.Atoi(s)
	}
	if s, ok := vs[1].(string); ok {
		cr.solo, _ = strconv.Atoi(s)
	}
	return cr
}

func (w *worker) event(j *job, state JobState) JobEvent {
	return JobEvent{Queue: j.queue, ID: j.id, Type: j.typ, State: state, Retried: j.retried, MaxRetry: j.maxRetry,
		Crashes: j.crashes, Component: w.id.String(), PID: w.pid}
}

// toxic archives a task that crashed its worker too often, without
// running it: asynq archives on the SkipRetry the error carries, with the
// error's text as LastErr (which keeps the count). The crash counters are
// deleted by the archive itself (the hook sends toxicArchive for a task
// marked here): an operator who runs the archived task again gets a run,
// not the same verdict at once, and a worker killed before its archive is
// written leaves them for the next dequeue's verdict
// (TestToxicCountersOutliveALostArchive).
func (w *worker) toxic(ctx context.Context, j *job) error {
	w.hook.markToxic(j.id) // first: asynq may write the archive as soon as the task's context ends
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

// errNotRecorded ends a task whose running record Redis never took.
var errNotRecorded = errors.New("the task's running record could not be written: its handler did not begin")

// begin records the task as running and announces it, before the handler
// runs (in a round trip it may share with other tasks'), and reports
// whether the record is in Redis. It waits while Redis is away: a handler
// that began without its record and crashed the process would leave no
// trace of its run, and its crash would not count against the task: a
// toxic task would run once more than job_crash_retries allows
// (TestHandlerBeginsOnlyOnRecord). It gives up when ctx ends (asynq gave
// up on the task).
func (w *worker) begin(ctx context.Context, j *job) bool {
	sent := make(chan bool, 1)
	w.current.change(j.id, true, func(cur currentChange) {
		ev := w.event(j, StateProcessing)
		cur.mark(&ev)
		w.batch.add(writeReq{what: "processing", task: j.id, sent: sent, fill: func(ctx context.Context, pipe redis.Pipeliner) {
			pipe.HSet(ctx, w.store.Keys().Running(w.id), j.id, runningValue(w.pid, j.start))
			if cur.changed {
				w.store.SetCurrentJobTo(ctx, pipe, w.id, cur.job, cur.seq)
			}
			jobEvents(ctx, w.store, pipe, j.start, ev)
		}})
	})
	select {
	case written := <-sent:
		return written
	case <-ctx.Done(): // asynq gave up on the task (its deadline, its shutdown)
		return false
	}
}

// write queues one bookkeeping write (see batcher); a failure costs only
// the record (the task goes on), so it is logged.
func (w *worker) write(_ context.Context, j *job, what string, fill func(context.Context, redis.Pipeliner)) {
	w.batch.add(writeReq{what: what, task: j.id, fill: fill})
}

// run calls the handler. It returns when the handler does, or when the
// task's context ends (asynq's deadline, its shutdown abort, a cancel, or
// the pool's task timeout for a task with none of its own), whichever is
// first.
func (w *worker) run(ctx context.Context, j *job, h asynq.Handler, t *asynq.Task) error {
	hctx, cancelRun := context.WithCancel(context.WithValue(ctx, jobKey{}, j))
	defer cancelRun()
	// The task's own Timeout or Deadline wins; the pool's task_timeout is
	// for tasks with none (TimeoutOf).
	if d, _ := w.attemptTimeout(ctx); d > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(hctx, d)
		defer cancel()
	}
	if !w.runs.start(j.run, cancelRun) {
		return context.Canceled // handed back by asynq's shutdown: not started
	}
	done := make(chan error, 1)
	go func() {
		defer close(j.run.returned)
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
		if w.runs.handedBack(j.run) {
			return hctx.Err() // asynq's shutdown hands it back, or not (handBack)
		}
		// Its deadline, or a cancel (during a shutdown too: the task's
		// deadline may come before the shutdown's hand-back, and asynq
		// then writes its retry or archive): a handler that heeds its
		// context returns now; one that does not within stuckGrace is
		// stuck.
		timeout := make(chan struct{})
		t := w.clock.AfterFunc(stuckGrace, func() { close(timeout) })
		defer t.Stop()
		select {
		case <-done:
			return hctx.Err() // asynq has written the deadline's outcome already
		case <-timeout:
		}
		j.stuck = true
		w.runs.decide(j.run, true)
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
	w.recovering.done(j)
	dur := end.Sub(j.start)
	ev := w.event(j, StateDone)
	ev.DurationMS = dur.Milliseconds()
	ev.ShortCircuit = j.shortCircuit
	ret := err
	// During a shutdown, a task whose context asynq cancelled is one it gave
	// up on and put back, whatever the handler answered (a normal outcome
	// is written before asynq cancels). A cancel or a lost lease in those
	// same seconds is reported as an abort too: asynq retries those.
	aborted := w.shuttingDown.Load() && (errors.Is(ctx.Err(), context.Canceled) || w.runs.handedBack(j.run))
	ok := err == nil && !aborted
	// A handler asynq's shutdown gave up on that is still inside the task
	// (it did not heed its context) keeps the task's running record: if it
	// then brings the process down, the supervisor's recovery must count
	// that crash against the task: without the record the recovery finds
	// no run, counts nothing, and a crash job that kills the process on its
	// way out runs once more than job_crash_retries allows
	// (TestShutdownNeverHandsBackARunningHandler). The process is ending:
	// its recovery, owner-scoped, removes the record.
	keepRunning := aborted && j.run != nil && w.runs.inside(j.run)
	switch {
	case j.stuck:
		// Still inside its task: its running record stays, for the
		// crash the supervisor counts once this process exits (see
		// stuckGrace); the task stays active and held under it.
		keepRunning, ret = true, err
		ev.State, ev.Error = StateStuck, fmt.Sprintf("handler did not return within %s of its context's end (%v): its worker exits once its other tasks are done; the task is requeued then, a crash counted against it", stuckGrace, err)
		w.hook.held.stick(j.id, end)
		w.metrics.StuckHandlers.Add(1)
		w.log.Error("handler stuck: it did not return once its context ended; this worker takes no more tasks and exits once its others are done (counted as a crash); the task is requeued then",
			"task", j.id, "type", j.typ, "ran", dur, "err", err)
		w.stuckOnce.Do(func() { close(w.stuck) })
	case aborted:
		ev.State = StateAbortedShutdown
		if err != nil {
			ev.Error = err.Error()
		}
		w.metrics.AbortedOnShutdown.Add(1)
		w.log.Warn("task aborted by shutdown: requeued", "task", j.id, "type", j.typ, "ran", dur)
	case err == nil:
		w.metrics.JobsDone.Add(1)
		w.failuresInRow.Store(0)
	default:
		ret = classify(j, err)
		ev.State, ev.Error = StateError, err.Error()
		var je *jobError
		if errors.As(ret, &je) {
			ev.Code = je.code
		}
		ev.Final = ev.Code != "" && (je == nil || !je.retrying)
		w.metrics.JobsFailed.Add(1)
		w.metrics.countFailure(ev.Code)
		// A handler's failure (not a missing handler: a fresh process
		// would not have one either) counts toward max_consecutive_failures.
		if ev.Code != CodeNoHandler {
			if n := w.failuresInRow.Add(1); w.env.MaxConsecutiveFailures > 0 && n >= int64(w.env.MaxConsecutiveFailures) {
				w.failingOnce.Do(func() { close(w.failing) })
			}
		}
		w.log.Warn("task failed", "task", j.id, "type", j.typ, "retried", j.retried, "max_retry", j.maxRetry,
			"code", ev.Code, "err", err)
	}
	if ok {
		w.avg.add(dur)
		if w.metrics.InflightJobs.Load() <= 1 {
			w.flushAverage() // not busy: no need to wait for the next second
		}
	}
	if kept, size := w.cleanScratch(j, scratch, ok); kept {
		ev.ScratchDir, ev.ScratchBytes = scratch, size
	}
	keys := w.store.Keys()
	w.current.change(j.id, false, func(cur currentChange) {
		cur.mark(&ev)
		w.write(ctx, j, string(ev.State), func(ctx context.Context, pipe redis.Pipeliner) {
			if !keepRunning {
				pipe.HDel(ctx, keys.Running(w.id), j.id)
			}
			if cur.changed {
				w.store.SetCurrentJobTo(ctx, pipe, w.id, cur.job, cur.seq)
			}
			if ok && j.crashes > 0 {
				pipe.Del(ctx, keys.JobCrashes(w.q, j.id), keys.JobSoloCrashes(w.q, j.id))
			}
			if ev.ScratchDir != "" {
				pipe.Set(ctx, keys.JobScratch(w.q, j.id), strconv.FormatInt(ev.ScratchBytes, 10)+" "+ev.ScratchDir, JobKeyTTL)
			}
			jobEvents(ctx, w.store, pipe, end, ev)
		})
	})
	return ret
}

// classify gives a handler error the code and retry decision of docs/design.md
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

// avgFlushInterval is how often a worker folds its jobs' durations into the
// queue's rolling average: one script call a second rather than one a job.
const avgFlushInterval = time.Second

// avgScript folds n jobs whose mean duration is m into the queue's rolling
// average: as n single updates of weight max(1/count, minimum) would,
// approximately (the weight is taken at the batch's end).
// KEYS: the queue stats hash. ARGV: mean ms, n, minimum weight.
var avgScript = redis.NewScript(`
local n = tonumber(ARGV[2])
local total = redis.call("HINCRBY", KEYS[1], "jobs", n)
local m = tonumber(ARGV[1])
local avg = tonumber(redis.call("HGET", KEYS[1], "avg_ms") or m)
local a = math.max(1 / total, tonumber(ARGV[3]))
local eff = 1 - math.pow(1 - a, n)
if total == n then eff = 1 end
avg = avg + eff * (m - avg)
redis.call("HSET", KEYS[1], "avg_ms", string.format("%.3f", avg))
return 1`)

// durations sums job durations between flushes.
type durations struct {
	mu  sync.Mutex
	sum time.Duration
	n   int
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	d.sum += x
	d.n++
	d.mu.Unlock()
}

// take returns the mean and count since the last take.
func (d *durations) take() (mean time.Duration, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return 0, 0
	}
	mean, n = d.sum/time.Duration(d.n), d.n
	d.sum, d.n = 0, 0
	return mean, n
}

// flushAverage queues the fold of the durations gathered since the last one.
func (w *worker) flushAverage() {
	mean, n := w.avg.take()
	if n == 0 {
		return
	}
	key := w.store.Keys().QueueStats(w.q)
	w.batch.add(writeReq{what: "average", fill: func(ctx context.Context, pipe redis.Pipeliner) {
		// Loaded at start; after a Redis restart lost it, the batcher
		// reloads it on NOSCRIPT (those durations are lost).
		avgScript.EvalSha(ctx, pipe, []string{key}, float64(mean.Microseconds())/1000, n, avgWeight)
	}})
}

// averages flushes the rolling average, and gives back the tasks taken
// ahead that waited too long for a handler slot (giveBackIdle), every
// avgFlushInterval until ctx ends.
func (w *worker) averages(ctx context.Context) {
	t := time.NewTicker(avgFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.flushAverage()
			w.giveBackIdle()
		}
	}
}

// currentJobs tracks the tasks this process runs, for the component
// record's current_job: the most recently started one still running.
type currentJobs struct {
	mu  sync.Mutex
	ids []string
	job string // the current job as last written
	seq int64  // changes of job so far (the record's current_seq)
}

// currentChange is what one start or end did to the current job.
type currentChange struct {
	job     string // the current job after it ("" idle)
	seq     int64  // the change's number, if changed
	changed bool
}

// mark tells the job event of a change that it changed its worker's
// current job: the event broker makes the worker's worker_update of it,
// with no write of its own (server's TestCurrentJobLive and
// TestCurrentJobBrokerOrder).
func (c currentChange) mark(ev *JobEvent) {
	if c.changed {
		ev.WorkerJob, ev.WorkerSeq = c.job, c.seq
	}
}

// change adds (start) or removes id and, under the same lock, calls queue
// with what that did to the current job: writes are queued in the order
// the changes were made, each change numbered.
func (c *currentJobs) change(id string, start bool, queue func(currentChange)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start {
		c.ids = append(c.ids, id)
	} else if i := slices.Index(c.ids, id); i >= 0 {
		c.ids = slices.Delete(c.ids, i, i+1)
	}
	current := ""
	if len(c.ids) > 0 {
		current = c.ids[len(c.ids)-1]
	}
	ch := currentChange{job: current}
	if current != c.job {
		c.seq++
		c.job = current
		ch.seq, ch.changed = c.seq, true
	}
	queue(ch)
}
