package explore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/explore/internal/hostproto"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// heal ends every fault: timed faults end at once, down hosts start
// again, drains and pauses are lifted, pool sizes go back to the
// configured ones.
func (w *world) heal() {
	close(w.healing)
	w.ends.Wait()
	var wg sync.WaitGroup
	for _, h := range w.hosts {
		started := h.idx < w.p.Hosts
		for _, s := range w.plan.Steps {
			started = started || (s.Kind == HostNew && s.Host == h.idx)
		}
		if started && h.current() == nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.restartHost(h, "heal")
			}()
		}
	}
	up := make(chan struct{})
	go func() {
		wg.Wait()
		close(up)
	}()
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		w.violate(0, "a host could not start again within 30 s after the faults ended (see its log)")
		w.stopBackground() // the restarts give up
		<-up
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range w.hosts {
		_ = supervisor.SetDrain(ctx, w.store, h.id, false)
	}
	_, _, _ = w.ctl.ResumeAll(ctx, w.queues())
	for _, q := range w.queues() {
		_, _ = w.ctl.ResumeQueue(ctx, q)
	}
	w.resetSizes()
	for _, p := range w.p.Pools {
		_ = supervisor.SetPoolSize(ctx, w.store, p.Queue, p.Workers)
	}
	w.b.logf("faults over: every host up, no drain, no pause, pools at their configured sizes")
}

// settle waits one lease and one TTL, then until every slot is healthy or
// failed or held for a reason the schedule explains (invariant 4), and
// checks the restart counters against the crashes injected (invariant 5).
func (w *world) settle(v ledgerView) {
	time.Sleep(Lease + HBTTL) // the settling time of invariant 4
	crashJobs := map[string]bool{}
	w.jobs.mu.Lock()
	for id, j := range w.jobs.byID {
		if j.typ == "crash" || j.typ == "hang" {
			// A hang job's run ends its process too: its handler is
			// stuck past the timeout, and the worker exits (counted).
			crashJobs[id] = true
		}
	}
	w.jobs.mu.Unlock()
	deadline := time.Now().Add(10*time.Second + BackoffMax)
	var cs []health.Component
	var why []string
	for {
		// Crash jobs keep running while we wait: read the ledger again.
		if lv, err := w.readLedger(); err == nil {
			v = lv
		}
		injected := crashRuns(v, crashJobs)
		var err error
		cs, err = w.records(w.slots())
		why = why[:0]
		if err != nil {
			why = append(why, err.Error())
		}
		for _, c := range cs {
			comp := c.ID.String()
			n := w.b.crashCount(comp) + injected[comp]
			switch {
			case c.Status == health.StatusHealthy:
			case c.Status == health.StatusFailed && n >= w.p.MaxInWindow:
			case c.Status == health.StatusStopped && c.Held && w.b.mayBeHeld(comp):
			default:
				why = append(why, fmt.Sprintf("%s %s held=%v reason %q on %s (crashes injected: %d)", comp, c.Status, c.Held, c.Reason, c.Host, n))
			}
		}
		if len(why) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling Redis: the supervisors act on their own
	}
	if len(why) > 0 {
		w.violate(4, "not settled %s after the faults ended: %s", time.Since(w.b.quietSince()).Round(100*time.Millisecond), strings.Join(why, "; "))
	}
	injected := crashRuns(v, crashJobs)
	all, err := w.records(w.allSlots())
	if err != nil {
		w.violate(0, "read records: %v", err)
		return
	}
	for _, c := range all {
		comp := c.ID.String()
		n := w.b.crashCount(comp) + injected[comp]
		if got := c.Restarts.LifetimeRestarts; got > n {
			w.violate(5, "%s counts %d restarts (%d in the window, status %s %q) but only %d crashes were injected into its processes",
				comp, got, c.Restarts.RestartCount, c.Status, c.Restarts.FailureReason, n)
		}
		if c.Status == health.StatusFailed && n < w.p.MaxInWindow {
			w.violate(5, "%s is failed (%q) with %d crashes injected, fewer than max_in_window %d", comp, c.Restarts.FailureReason, n, w.p.MaxInWindow)
		}
	}
}

// revive restarts the failed and held slots so that their queues' jobs can
// finish, through any host's API.
func (w *world) revive() {
	cs, err := w.records(w.slots())
	if err != nil {
		return
	}
	for _, c := range cs {
		var req hostproto.Request
		switch {
		case c.Status == health.StatusFailed:
			req = hostproto.Request{Op: hostproto.OpReset, Component: c.ID.String(), Restart: true, Timeout: 10 * time.Second}
		case c.Status == health.StatusStopped && c.Held:
			req = hostproto.Request{Op: hostproto.OpRestart, Component: c.ID.String(), Timeout: 10 * time.Second}
		default:
			continue
		}
		if _, p := w.actingHost(0); p != nil {
			m, err := p.request(req, 15*time.Second)
			w.b.logf("revive %s (%s, held %v, on %s): answered %q err %q (%v)", c.ID, c.Status, c.Held, c.Host, m.Status, m.Err, err)
		}
	}
}

// waitJobs waits until every job is done (see jobsDone), reviving the
// slots that fail or are held meanwhile: a second toxic job may fail a
// worker again (job_crash_retries + 1 crashes reach max_in_window).
//
// Done must hold for jobsStable: a revive puts a dead worker's tasks back
// (one counted done while it waited for asynq's lease recovery), and its
// worker then runs or archives them; judged at the first moment done, such
// a task would be counted lost (the explorer's replay list,
// explore/testdata/seeds.txt, holds it).
//
// Past timeout it goes on while the jobs progress (jobsDone's measure
// grew in the last stall: jobsStall in a seed), up to twice timeout: a
// machine twice as slow as the budget assumed runs the same jobs in the
// same order, only later (two hang jobs in a one-worker pool take six runs
// at about 4 s each, and a loaded machine slows the worker's restarts),
// while a queue nobody serves stands still and is judged at timeout
// (TestWaitJobsGoesOnWhileTheJobsProgress).
func (w *world) waitJobs(timeout, stall time.Duration) bool {
	start := time.Now()
	deadline, hardDeadline := start.Add(timeout), start.Add(2*timeout)
	var doneSince, progressed time.Time
	lastProgress := -1
	for last := time.Now(); ; {
		done, _, progress := w.jobsDone()
		if progress > lastProgress {
			lastProgress, progressed = progress, time.Now()
		}
		switch {
		case !done:
			doneSince = time.Time{}
		case doneSince.IsZero():
			doneSince = time.Now()
		case time.Since(doneSince) >= jobsStable:
			if time.Since(start) > timeout {
				w.b.logf("jobs done %s after the faults ended, past their budget of %s: they progressed until then",
					time.Since(start).Round(time.Millisecond), timeout)
			}
			return true
		}
		if now := time.Now(); now.After(deadline) {
			if now.Sub(progressed) >= stall || now.After(hardDeadline) {
				return done
			}
		}
		if time.Since(last) > time.Second {
			w.revive()
			last = time.Now()
		}
		time.Sleep(100 * time.Millisecond) // polling Redis: the workers run the jobs
	}
}

// jobsStall is how long the jobs may stand still past their budget before
// they are judged: one hang job's run (its task timeout) and a worker's
// start, the longest step between two runs of a queue's jobs.
const jobsStall = TaskTimeout + StartTimeout

// jobsBudget is how long the jobs are given to be done once the faults
// ended: 10 s, and for each hang or crash job the runs it may take before
// it is toxic. A hang job's run is a task timeout, the stuck handler's
// grace, its worker's exit and a restart (queue.ErrStuckHandler): a queue
// behind one waits that long (two hang jobs in a one-worker pool are not
// archived within 10 s of the faults, nor the jobs behind them run). A
// crash job's run is a crash, a backoff and a new worker's start, and
// every max_in_window of them a failed worker to revive (three crash jobs
// in a one-worker pool take nine runs, and on a machine where a worker
// takes 0.6 s to start the last is archived well past 10 s). The
// explorer's replay list (explore/testdata/seeds.txt) holds both.
func (w *world) jobsBudget() time.Duration {
	d := 10 * time.Second
	w.jobs.mu.Lock()
	defer w.jobs.mu.Unlock()
	for _, j := range w.jobs.byID {
		switch j.typ {
		case "hang":
			d += time.Duration(w.toxicRuns(j.queue)) * (TaskTimeout + time.Second)
		case "crash":
			d += time.Duration(w.toxicRuns(j.queue)) * crashRun
		}
	}
	return d
}

// crashRun is what the jobs' budget gives each run of a crash job: the
// longest backoff, a worker's start on a loaded machine, and a share of
// the revive of a worker failed by the crashes (waitJobs revives once a
// second).
const crashRun = BackoffMax + time.Second

// jobsStable is how long every job must look done before the jobs are
// judged.
const jobsStable = 1500 * time.Millisecond

// stopAll stops every host gracefully, in parallel, checking each Stop
// (invariants 6 and 8).
func (w *world) stopAll() {
	var wg sync.WaitGroup
	for _, h := range w.hosts {
		if p := h.take(); p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.shutdownHost(h, p, "final stop")
			}()
		}
	}
	wg.Wait()
}

// waitActions waits a while for the operator actions still in flight; the
// final stop makes the others answer.
func (w *world) waitActions(d time.Duration) {
	done := make(chan struct{})
	go func() {
		w.actions.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		w.b.logf("operator actions still in flight %s after the jobs settled", d)
	}
}

// checkRaces reports the races the race detector logged in the hosts' logs.
func (w *world) checkRaces() {
	for _, h := range w.hosts {
		data, err := os.ReadFile(h.logf.Name())
		if err != nil {
			continue
		}
		i := bytes.Index(data, []byte("WARNING: DATA RACE"))
		if i < 0 {
			continue
		}
		report := data[i:]
		if j := bytes.Index(report, []byte("==================")); j > 0 {
			report = report[:j]
		}
		if len(report) > 4000 {
			report = report[:4000]
		}
		w.violate(9, "host %s: %s", h.id, report)
	}
}
