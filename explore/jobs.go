package explore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testledger"
)

// Job is one job the seed enqueues.
type Job struct {
	At    time.Duration
	Queue string
	Type  string // sleep, crash, hang, fail
	Ms    int    // sleep's length
}

// jobRec is what the explorer knows of an enqueued job.
type jobRec struct {
	id, queue, typ string
	maxRetry       int
	at             time.Time
	deleted        bool
	cancelled      bool // an operator cancelled it while it was active
	retriedAtRuns  int  // runs the ledger showed when an operator retried it (-1: never)
	// retriedAtCrashes is how many crashes had been injected into its
	// pool's processes when an operator retried it.
	retriedAtCrashes int
}

// jobBook is every job enqueued, and the data losses that may have taken
// some of them.
type jobBook struct {
	mu     sync.Mutex
	byID   map[string]*jobRec
	order  []string
	losses []time.Time
	n      int
	failed int // enqueues Redis refused
}

func newJobBook() *jobBook { return &jobBook{byID: map[string]*jobRec{}} }

func (j *jobBook) lost(at time.Time) {
	j.mu.Lock()
	j.losses = append(j.losses, at)
	j.mu.Unlock()
}

// lostSince reports whether Redis lost its data after t.
func (j *jobBook) lostSince(t time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, l := range j.losses {
		if !l.Before(t) {
			return true
		}
	}
	return false
}

// drawJobs draws the seed's stream of ordinary jobs: a sleep job every
// 60–140 ms through the fault phase.
func drawJobs(p Params, next func(int) int) []Job {
	var out []Job
	for at := 50 * time.Millisecond; at < p.Faults; at += time.Duration(60+next(81)) * time.Millisecond {
		q := p.Pools[next(len(p.Pools))].Queue
		out = append(out, Job{At: at, Queue: q, Type: "sleep", Ms: 20 + next(281)})
	}
	return out
}

// enqueue puts one job on its queue through asynq (queue.Client), with an
// id of the seed's own.
func (w *world) enqueue(j Job) {
	w.jobs.mu.Lock()
	w.jobs.n++
	id := "j" + strconv.Itoa(w.jobs.n)
	w.jobs.mu.Unlock()
	maxRetry := 0
	payload := []byte(nil)
	switch j.Type {
	case "sleep":
		for _, p := range w.p.Pools {
			if p.Queue == j.Queue {
				maxRetry = p.MaxRetry
			}
		}
		payload = []byte(strconv.Itoa(j.Ms))
	case "crash":
		maxRetry = 25 // the crash counter archives it, not asynq's retries
	case "fail":
		maxRetry = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	at := time.Now()
	// Known before the enqueue returns: an operator action may find the
	// task in Redis first (a delete that finds it pending while the
	// enqueue's reply is still on its way must mark it deleted, or the
	// judge finds the job vanished; the explorer's replay list,
	// explore/testdata/seeds.txt, holds it). The judge goes by order.
	w.jobs.mu.Lock()
	w.jobs.byID[id] = &jobRec{id: id, queue: j.Queue, typ: j.Type, maxRetry: maxRetry, at: at, retriedAtRuns: -1}
	w.jobs.mu.Unlock()
	_, err := w.qc.Enqueue(ctx, j.Queue, asynq.NewTask(j.Type, payload), asynq.TaskID(id),
		asynq.MaxRetry(maxRetry), asynq.Retention(time.Hour))
	w.jobs.mu.Lock()
	defer w.jobs.mu.Unlock()
	if err != nil {
		delete(w.jobs.byID, id)
		w.jobs.failed++
		return
	}
	w.jobs.order = append(w.jobs.order, id)
}

// runJobs enqueues the seed's stream until it ends or the faults stop.
func (w *world) runJobs(start time.Time, stop <-chan struct{}) {
	for _, j := range w.plan.Jobs {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(j.At))):
		}
		w.enqueue(j)
	}
}

// ledgerView is the ledger read at the end of a seed.
type ledgerView struct {
	runs, completions, failures map[string]int
	completers, runners         map[string][]int
	lastEnd, exits, procs       map[string]string
	owners                      map[string]string // task → pid whose handler is inside it now
	violations                  []string
}

func (w *world) readLedger() (ledgerView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var v ledgerView
	var errs []error
	var err error
	v.runs, err = w.lr.Counts(ctx, "runs")
	errs = append(errs, err)
	v.completions, err = w.lr.Counts(ctx, "completions")
	errs = append(errs, err)
	v.failures, err = w.lr.Counts(ctx, "failures")
	errs = append(errs, err)
	v.completers, err = w.lr.PIDLists(ctx, "completers")
	errs = append(errs, err)
	v.runners, err = w.lr.PIDLists(ctx, "runners")
	errs = append(errs, err)
	v.lastEnd, err = w.lr.Hash(ctx, "last_end")
	errs = append(errs, err)
	v.exits, err = w.lr.Hash(ctx, "exits")
	errs = append(errs, err)
	v.procs, err = w.lr.Hash(ctx, "procs")
	errs = append(errs, err)
	v.owners, err = w.lr.Hash(ctx, "owners")
	errs = append(errs, err)
	v.violations, err = w.lr.Violations(ctx)
	errs = append(errs, err)
	return v, errors.Join(errs...)
}

// runnersOf describes the processes that ran a task: pid, component,
// host and how each ended. A process with no exit in the ledger may live
// yet, or have ended without a word: a signal, or a crash job's exit 3;
// it is said "ended unrecorded", never "killed", which it may not have
// been.
func (v ledgerView) runnersOf(id string) string {
	var out []string
	for _, pid := range v.runners[id] {
		comp, host := v.procOf(pid)
		exit := v.exits[strconv.Itoa(pid)]
		if exit == "" {
			exit = "ended unrecorded (a signal, or a crash job's exit)"
			if alive(pid) {
				exit = "alive"
			}
		}
		out = append(out, fmt.Sprintf("%d %s on %s %s", pid, comp, host, exit))
	}
	if len(out) == 0 {
		return ""
	}
	return "; run by " + strings.Join(out, ", ")
}

// procOf is the component and host a worker pid worked for.
func (v ledgerView) procOf(pid int) (comp, host string) {
	comp, host, _ = strings.Cut(v.procs[strconv.Itoa(pid)], " ")
	return comp, host
}

// inHandler reports whether a live process's handler is inside task id
// now (the ledger's owner entry, dropped when the handler leaves): a run
// in progress, whatever earlier runs left behind.
func (v ledgerView) inHandler(id string) bool {
	pid, err := strconv.Atoi(v.owners[id])
	if err != nil {
		return false
	}
	return alive(pid)
}

// killed reports whether pid did not end on its own terms (no exits entry,
// or a planned exit the explorer asked for).
func (v ledgerView) killed(pid int) bool {
	e, ok := v.exits[strconv.Itoa(pid)]
	return !ok || strings.HasPrefix(e, "exit:")
}

// JobStats is what a seed measured about its jobs.
type JobStats struct {
	Enqueued, Refused, Completed, Archived, Deleted, LostToDataLoss, Duplicates int
	// Unrecorded: completed by the ledger, still active in asynq: its
	// worker kept the outcome and died with its host before writing it.
	Unrecorded int
	// AwaitingLease: active in asynq, its owner dead with its host (killed,
	// or cut from Redis): asynq's lease recovery runs it again.
	AwaitingLease int
	// ToxicUnseen: archived as toxic with no handler run in the ledger: a
	// worker crash injected while it was in flight, before the handler's
	// first ledger write.
	ToxicUnseen int
	// CancelledUnrun: archived "context canceled" with no handler run in
	// the ledger, after an operator cancelled it while active: the cancel
	// came between its dequeue and its handler's start (the handler
	// waits for its running record; TestJudgeCancelledBeforeItsHandler).
	CancelledUnrun int
}

// awaitingLease reports whether j is left to asynq's lease recovery: the
// process that holds it (its owner) is gone and its host was SIGKILLed
// since j was enqueued, or stopped while cut from Redis (the requeue it
// owed was lost with it); or nothing names its holder and some host was
// disturbed.
func (w *world) awaitingLease(v ledgerView, j jobRec) bool {
	if v.inHandler(j.id) {
		return false // it runs now: its outcome is coming
	}
	// The process that holds it is the one its owner field names (the
	// dequeue that made it active wrote it), whether its handler began
	// (a run) or not: a live owner puts it back itself once Redis answers
	// (a lost reply: the stranded sweep), a dead one's supervisor does
	// once it reaped it. Its last run may be an earlier process's, the
	// task requeued since and dequeued again: that process's host is not
	// the owner's (TestAwaitingLeaseJudgesTheOwnerNotTheLastRun). Without
	// an owner field (an
	// asynq dequeue Vigil did not see), its last run's process; without
	// either, a disturbance excuses it.
	pid, ok := w.ownerPID(j)
	if !ok {
		pids := v.runners[j.id]
		if len(pids) == 0 {
			return w.b.anyDisturbed(j.at, time.Now())
		}
		pid = pids[len(pids)-1]
	}
	// A zombie is dead: an orphan that exited is the explorer's child (its
	// subreaper) until the explorer reaps it
	// (TestAwaitingLeaseZombieOwnerIsDead).
	if alive(pid) {
		return false
	}
	// Only a process that died with its host: a host that lives reaps its
	// workers and requeues their tasks (at once, or once Redis is back).
	// A worker outlives its host by up to stop_timeout + 1 s (invariant
	// 2), and may dequeue meanwhile a job enqueued after its host died: a
	// dequeue held by a Redis pause goes through when the pause ends, and
	// a Redis cut off then keeps the shutting-down worker from handing the
	// task back (the explorer's replay list, explore/testdata/seeds.txt,
	// holds it).
	_, host := v.procOf(pid)
	since := j.at.Add(-(StopTimeout + time.Second))
	return w.b.killed(host, since, time.Now()) || w.b.stoppedCut(host, since, time.Now())
}

// activeFacts describes where j stands in asynq's structures and whether
// the process its owner field names lives, for a job judged not done: a
// dead worker's task left active, and a live one's outcome never written,
// cannot be told apart once the seed's Redis is gone
// (TestJudgeCompletedStillActive). The
// hash is asynq's (its payload left out); "active list" is LPOS in the
// queue's active list (Vigil's recovery and asynq's find a task there
// only), "lease" its deadline in the lease set.
func (w *world) activeFacts(j jobRec) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	q := "asynq:{" + j.queue + "}:"
	var b strings.Builder
	b.WriteString("; facts:")
	h, err := w.rdb.HGetAll(ctx, q+"t:"+j.id).Result()
	if err != nil {
		fmt.Fprintf(&b, " hash unread (%v)", err)
	} else {
		keys := make([]string, 0, len(h))
		for k := range h {
			if k != "msg" { // the payload (protobuf)
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%q", k, h[k])
		}
	}
	if pos, err := w.rdb.LPos(ctx, q+"active", j.id, redis.LPosArgs{}).Result(); err == nil {
		fmt.Fprintf(&b, ", active list at %d", pos)
	} else {
		fmt.Fprintf(&b, ", active list: %v", err)
	}
	if at, err := w.rdb.ZScore(ctx, q+"lease", j.id).Result(); err == nil {
		fmt.Fprintf(&b, ", lease ends in %s", time.Until(time.Unix(int64(at), 0)).Round(time.Second))
	} else {
		fmt.Fprintf(&b, ", lease: %v", err)
	}
	if pid, ok := w.ownerPID(j); ok {
		switch _, st, _, ok := stat(pid); {
		case !ok:
			fmt.Fprintf(&b, ", owner %d gone", pid)
		case st == 'Z':
			fmt.Fprintf(&b, ", owner %d a zombie", pid)
		default:
			fmt.Fprintf(&b, ", owner %d alive (state %c)", pid, st)
		}
	}
	return b.String()
}

// taskState is a job as asynq showed it.
type taskState struct {
	state, lastErr string
	err            error // reading it failed
}

// ownerPID is the pid in j's owner field (asynq's task hash), if any.
func (w *world) ownerPID(j jobRec) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	owner, err := w.rdb.HGet(ctx, "asynq:{"+j.queue+"}:t:"+j.id, "vigil_owner").Result()
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(owner, ':')
	pid, err := strconv.Atoi(owner[i+1:])
	return pid, err == nil && pid > 0
}

// judgeJobs checks invariant 7 over every job enqueued. It reads asynq's
// state of every job first, and the ledger (read) after: a handler writes
// its completion to the ledger before its worker writes asynq's, so a
// completion asynq showed is in the ledger read after it. The other order
// would take a job that completed between the two reads for one that
// asynq completed without its handler succeeding
// (TestJudgeJobCompletingDuringTheJudgement).
func (w *world) judgeJobs(read func() (ledgerView, error)) (JobStats, error) {
	w.jobs.mu.Lock()
	ids := append([]string(nil), w.jobs.order...)
	st := JobStats{Enqueued: len(ids), Refused: w.jobs.failed}
	w.jobs.mu.Unlock()
	states := make(map[string]taskState, len(ids))
	for _, id := range ids {
		w.jobs.mu.Lock()
		q := w.jobs.byID[id].queue
		w.jobs.mu.Unlock()
		info, err := w.insp.GetTaskInfo(q, id)
		switch {
		case err == nil:
			states[id] = taskState{state: info.State.String(), lastErr: info.LastErr}
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			states[id] = taskState{state: "gone"}
		default:
			states[id] = taskState{err: err}
		}
	}
	v, err := read()
	if err != nil {
		return st, err
	}
	for _, msg := range v.violations {
		// "<task> started in <pid> while <pid> runs it": no excuse, a
		// worker shutting down included: its shutdown hands a task back
		// only once its handler returned (TestJudgeTwoHandlers).
		w.violate(7, "two live handlers inside one task: %s", msg)
	}
	for _, id := range ids {
		w.jobs.mu.Lock()
		j := *w.jobs.byID[id]
		w.jobs.mu.Unlock()
		if j.deleted {
			st.Deleted++
			continue
		}
		ts := states[id]
		if ts.err != nil {
			w.violate(0, "read task %s: %v", id, ts.err)
			continue
		}
		state, lastErr := ts.state, ts.lastErr
		runs, done := v.runs[id], v.completions[id]
		what := fmt.Sprintf("%s job %s on %s (asynq: %s %q; ledger: %d runs, %d completions, last end %q%s)",
			j.typ, id, j.queue, state, lastErr, runs, done, v.lastEnd[id], v.runnersOf(id))
		switch {
		case state == "gone" && w.jobs.lostSince(j.at):
			st.LostToDataLoss++
			continue
		case state == "gone":
			w.violate(7, "%s vanished with no data loss", what)
			continue
		case state == "active" && done > 0 && w.awaitingLease(v, j):
			// The handler succeeded; its worker, cut from Redis, kept the
			// outcome and died with its host before it could write it:
			// asynq will run it again once its lease expires. Done as far
			// as the ledger shows. (A worker that lives writes what it
			// kept once Redis answers; one that died with its host alive
			// is requeued by its supervisor.)
			st.Unrecorded++
			st.Completed++
			if done > 1 {
				st.Duplicates++
			}
			continue
		case state == "active" && done > 0:
			w.violate(7, "%s: its handler succeeded but asynq still shows it active (the outcome was never written, and its worker did not die with its host)%s", what, w.activeFacts(j))
			continue
		case state == "active" && w.awaitingLease(v, j):
			// Its worker died with its host (or cut from Redis): docs/design.md §11
			// leaves such a task to asynq's own lease recovery (30 s).
			st.AwaitingLease++
			continue
		case state != "completed" && state != "archived":
			w.violate(7, "%s is not done%s", what, w.activeFacts(j))
			continue
		}
		if j.typ == "sleep" {
			switch {
			case done == 0 && state == "completed":
				w.violate(7, "%s: asynq says completed, its handler never succeeded", what)
			case done > 1:
				st.Duplicates++
				if why := w.unexplainedDuplicate(v, id, j); why != "" {
					w.violate(7, "%s completed %d times: %s", what, done, why)
				}
			}
		} else if state == "completed" {
			w.violate(7, "%s: a %s job completed", what, j.typ)
		}
		if state == "completed" {
			st.Completed++
			continue
		}
		st.Archived++
		switch {
		case runs == 0 && strings.HasPrefix(lastErr, "toxic") && w.injectedCrashesIn(j.queue) > 0:
			// Its worker, running its handler alone, was killed before the
			// handler's first ledger write (a round trip of its own). Not a
			// toxic neighbour's crash: that one counts against a task only
			// while both are in flight, never alone (the gate of
			// queue/gate.go).
			st.ToxicUnseen++
		case runs == 0 && j.cancelled && strings.Contains(lastErr, "context canceled"):
			st.CancelledUnrun++
		case runs == 0:
			w.violate(7, "%s archived without having run", what)
		case j.retriedAtRuns >= 0 && runs <= j.retriedAtRuns && strings.HasPrefix(lastErr, "toxic") &&
			w.injectedCrashesIn(j.queue) > j.retriedAtCrashes:
			// Retried, then dequeued by a worker killed (an injected
			// fault) with its running record written and its handler not
			// yet begun: that crash counts against it, as against any
			// task whose worker dies holding it, and one past
			// job_crash_retries makes it toxic again (the same as a first
			// run's, above; the explorer's replay list,
			// explore/testdata/seeds.txt, holds it).
			st.ToxicUnseen++
		case j.retriedAtRuns >= 0 && runs <= j.retriedAtRuns:
			w.violate(7, "%s archived again without running after an operator retry (it had %d runs then)", what, j.retriedAtRuns)
		case (j.typ == "crash" || j.typ == "hang") && j.retriedAtRuns < 0 && runs > w.toxicRuns(j.queue)+w.disturbedRuns(v, id, j)+stoppedRuns(v, id, j)+w.faultedRuns(v, id) && !w.jobs.lostSince(j.at):
			w.violate(7, "%s: a toxic job ran %d times with job_crash_retries %d", what, runs, w.p.JobCrashRetries)
		}
	}
	return st, nil
}

// unexplainedDuplicate says why a repeated completion is not at least once
// delivery ("" when it is): every completion but the last must come from
// a process that ended before the jobs settled — killed, or stopped: with
// stop_timeout at its floor a stopped worker gets no time to finish, and
// asynq requeues what its handlers were doing — or whose host lost Redis
// meanwhile (to an outage, a partition, a pause: a failover is no excuse).
func (w *world) unexplainedDuplicate(v ledgerView, id string, j jobRec) string {
	pids := v.completers[id]
	var bad []string
	for _, pid := range pids[:len(pids)-1] {
		_, host := v.procOf(pid)
		_, _, _, exists := stat(pid)
		if !exists || v.killed(pid) || w.b.disturbedBut(host, j.at, time.Now(), 0, whyFailover) {
			continue
		}
		if w.b.disturbed(host, j.at, time.Now(), 0) {
			bad = append(bad, fmt.Sprintf("pid %d (%s) still runs, and its host lost Redis only to a failover", pid, host))
			continue
		}
		bad = append(bad, fmt.Sprintf("pid %d (%s) still runs, and its host kept Redis all along", pid, host))
	}
	sort.Strings(bad)
	return strings.Join(bad, "; ")
}

// crashRuns counts, per component, the runs of crash jobs (and hang jobs)
// in its processes: each one exited its worker (a hang job's handler is
// stuck past its timeout, and its worker exits: queue.ErrStuckHandler).
func crashRuns(v ledgerView, crashJobs map[string]bool) map[string]int {
	out := map[string]int{}
	for id := range crashJobs {
		for _, pid := range v.runners[id] {
			comp, _ := v.procOf(pid)
			out[comp]++
		}
	}
	return out
}

var _ = testledger.OutcomeOK

// stoppedRuns counts the runs of a hang job in processes that were
// stopped while its handler hung (asked to stop: they exited 0 on their
// own terms, the task left active and put back by the supervisor): a
// stop's exit counts no crash against the tasks
// (queue's TestRecoverAfterAStopCountsNoCrash), so such a run does not
// bring the job nearer to toxic. A crash job's run never ends so.
func stoppedRuns(v ledgerView, id string, j jobRec) int {
	if j.typ != "hang" {
		return 0
	}
	n := 0
	for _, pid := range v.runners[id] {
		if v.exits[strconv.Itoa(pid)] == "clean:0" {
			n++
		}
	}
	return n
}

// faultedRuns counts the runs of a job in processes a worker fault was
// injected into (a kill, a SIGSTOP, an exit): their end may be the
// fault's, or their supervisor's stop of a frozen process (a release's
// SIGKILL at stop_timeout, which counts no crash), not the job's (the
// explorer's replay list, explore/testdata/seeds.txt, holds it).
func (w *world) faultedRuns(v ledgerView, id string) int {
	n := 0
	for _, pid := range v.runners[id] {
		if w.b.wasFaulted(pid) {
			n++
		}
	}
	return n
}

// disturbedRuns counts the runs of a job in processes whose host lost
// Redis (or was down) since the job was enqueued: their crash may not
// have been counted against the job.
func (w *world) disturbedRuns(v ledgerView, id string, j jobRec) int {
	n := 0
	for _, pid := range v.runners[id] {
		if _, host := v.procOf(pid); w.b.disturbed(host, j.at, time.Now(), 0) {
			n++
		}
	}
	return n
}

// jobsDone reports whether every job is done as far as the ledger and
// asynq show (see judgeJobs), how many are not, and a measure of the
// jobs' progress: the runs their handlers began, the completions and
// failures they wrote, and the jobs done. The measure grows while the
// workers get on with the jobs, however slowly, and stands still when
// nothing runs them.
func (w *world) jobsDone() (done bool, left, progress int) {
	v, err := w.readLedger()
	if err != nil {
		return false, -1, -1
	}
	w.jobs.mu.Lock()
	jobs := make([]jobRec, 0, len(w.jobs.byID))
	for _, j := range w.jobs.byID {
		jobs = append(jobs, *j)
	}
	w.jobs.mu.Unlock()
	for _, j := range jobs {
		if j.deleted {
			continue
		}
		info, err := w.insp.GetTaskInfo(j.queue, j.id)
		completed := j.typ == "sleep" && v.completions[j.id] > 0
		switch {
		case completed && (err != nil || info.State != asynq.TaskStateActive):
			// Done by the ledger; a duplicate run may still come.
		case err != nil && w.jobs.lostSince(j.at):
		case err != nil:
			left++
		case info.State == asynq.TaskStateArchived || info.State == asynq.TaskStateCompleted:
		case info.State == asynq.TaskStateActive && w.awaitingLease(v, j):
		default:
			left++ // active: its outcome (kept while Redis was away) is still to be written
		}
	}
	progress = len(jobs) - left
	for _, m := range []map[string]int{v.runs, v.completions, v.failures} {
		for _, n := range m {
			progress += n
		}
	}
	return left == 0, left, progress
}

// toxicRuns is how many times a toxic job of queue q may run:
// job_crash_retries + 1, and one more with job_crash_retries 0 in a pool of
// concurrency > 1 — a crash with a neighbour's handler in flight cannot be
// told the toxic job's, which then runs once alone to be sure (queue's
// TestSharedCrashesAloneAreNotToxic).
func (w *world) toxicRuns(q string) int {
	n := w.p.JobCrashRetries + 1
	for _, p := range w.p.Pools {
		if p.Queue == q && p.Concurrency > 1 && w.p.JobCrashRetries == 0 {
			n++
		}
	}
	return n
}

// injectedCrashesIn counts the crashes injected into the processes of
// queue q's pool (kills, hangs, exits), the crash jobs not included.
func (w *world) injectedCrashesIn(q string) int {
	n := 0
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	for comp, c := range w.b.crashes {
		if strings.HasPrefix(comp, "worker:"+q+":") {
			n += c
		}
	}
	return n
}
