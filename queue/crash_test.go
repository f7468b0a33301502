package queue_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
)

// TestRecoveredJobEventOrder: a job that kills its worker on its first run
// comes back at once and completes on the next.
func TestRecoveredJobEventOrder(t *testing.T) {
	e := newQEnv(t)
	s := e.supervise(pool{workers: 1})
	w := e.watch()
	first := s.waitHealthy(w)[0]
	id := e.enqueue(e.client(), "crash-once", "")
	w.untilJob(id, queue.StateDone)
	want := states(created, processing, queue.StateRequeuedStale, processing, done)
	if got := e.states(id); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	evs := e.events(queue.JobTopic(e.q, id))
	rq := evs[2].job
	if rq.Crashes != 1 || rq.PID != first.PID || rq.Component != first.ID.String() {
		t.Fatalf("requeued:stale event %+v; want 1 crash, pid %d", rq, first.PID)
	}
	if again := evs[3].job; again.Crashes != 1 || again.PID == first.PID {
		t.Fatalf("second processing %+v: want the replacement process, crashes 1", again)
	}
	if n := e.Client.Exists(context.Background(), e.store.Keys().JobCrashes(e.q, id)).Val(); n != 0 {
		t.Fatal("crash counter kept after the task completed")
	}
}

// TestToxicJobArchivedAfterThreeRuns: a task that kills its worker every
// time runs exactly three times (job_crash_retries 2) and is archived
// toxic, while the other jobs keep flowing and no worker fails.
func TestToxicJobArchivedAfterThreeRuns(t *testing.T) {
	e := newQEnv(t)
	s := e.supervise(pool{workers: 2})
	w := e.watch()
	s.waitHealthy(w)
	c := e.client()
	e.enqueue(c, "crash", "", asynq.TaskID("toxic"))
	var others []string
	for range 40 {
		others = append(others, e.enqueue(c, "sleep", "5"))
	}
	w.untilJob("toxic", queue.StateToxic)
	w.until("the other jobs done", waitTimeout, func(seen []streamEvent) bool {
		return len(s.counts("completions")) == len(others)
	})
	if runs := s.counts("runs")["toxic"]; runs != 3 {
		t.Fatalf("toxic task ran %d times, want 3", runs)
	}
	want := states(created, processing, queue.StateRequeuedStale, processing, queue.StateRequeuedStale,
		processing, queue.StateRequeuedStale, queue.StateToxic)
	// In this order exactly: a requeued:stale is written before its task
	// is pending again (issue 20, recovery order), so before the next
	// processing, and before the toxic verdict of the next dequeue.
	if got := e.states("toxic"); !slices.Equal(got, want) {
		t.Fatalf("toxic task's events %v, want %v", got, want)
	}
	info := waitArchived(t, e, "toxic")
	if info.LastErr != "toxic: worker crashed 3 times" {
		t.Fatalf("archived with LastErr %q", info.LastErr)
	}
	for _, id := range others {
		if s.counts("completions")[id] < 1 {
			t.Fatalf("job %s never completed", id)
		}
	}
	cs, _ := e.store.GetMany(context.Background(), s.ids)
	for _, c := range cs {
		if c.Status == health.StatusFailed {
			t.Fatalf("worker %s failed: %+v", c.ID, c.Restarts)
		}
	}
	if v := s.violations(); len(v) > 0 {
		t.Fatalf("tasks ran in two handlers at once: %v", v)
	}
}

// TestKillsLoseNoJob sends jobs through four workers (concurrency 2) while
// killing workers at random with SIGKILL: every job completes, none ever
// runs in two handlers at once, and only tasks of killed workers complete
// more than once (delivery is at least once). Every task completes with no
// failed attempt: no kill was left to asynq's lease recovery.
func TestKillsLoseNoJob(t *testing.T) {
	n, wantKills := 300, 20
	if testredis.Real() {
		n = 1000
	}
	e := newQEnv(t)
	c := e.client()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.enqueue(c, "sleep", strconv.Itoa(5+rand.IntN(30)), asynq.Retention(time.Hour))
	}
	w := e.watch()
	begin := time.Now()
	s := e.supervise(pool{workers: 4, concurrency: 2, crashRetries: 1000})
	// Kill at evenly spaced points of the run, whatever its speed.
	killed := map[int]bool{}
	kills, target := 0, wantKills+5
	deadline := time.Now().Add(2 * waitTimeout)
	for {
		done := int(e.Client.HLen(context.Background(), s.ledger+"completions").Val())
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d jobs completed, %d kills; not completed:\n%s", time.Since(begin), done, n, kills,
				s.explainMissing(ids))
		}
		live := s.healthy()
		rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		for _, victim := range live {
			if kills >= target || done < (kills+1)*n/(target+2) {
				break
			}
			if !killed[victim.PID] {
				killed[victim.PID] = true
				kill(t, victim.PID)
				kills++
			}
		}
		w.next(10 * time.Millisecond)
	}
	elapsed := time.Since(begin)
	if kills < wantKills {
		t.Fatalf("only %d kills", kills)
	}
	if v := s.violations(); len(v) > 0 {
		t.Fatalf("tasks ran in two handlers at once: %v", v)
	}
	requeued := map[string]bool{}
	open := map[string]int{} // task → pid of its run in progress (a processing with no outcome yet)
	outOfOrder := 0
	for _, se := range e.events(queue.TopicJobs) {
		id, pid := se.job.ID, se.job.PID
		switch se.job.State {
		case queue.StateProcessing:
			open[id] = pid
		case queue.StateRequeuedStale:
			requeued[id] = true
			// Issue 20, recovery order: the requeue of a dead process's
			// task comes before the task's next processing, never while
			// another process's run of it is open.
			if p := open[id]; p != 0 && p != pid {
				outOfOrder++
				t.Errorf("task %s: requeued:stale of pid %d after a processing by pid %d", id, pid, p)
			}
			delete(open, id)
		case queue.StateDone, queue.StateError, queue.StateToxic, queue.StateRequeuedStranded, queue.StateAbortedShutdown:
			delete(open, id)
		}
	}
	completions := s.counts("completions")
	repeated := 0
	for _, id := range ids {
		switch k := completions[id]; {
		case k == 0:
			t.Fatalf("job %s lost", id)
		case k > 1 && !requeued[id]:
			t.Fatalf("job %s completed %d times but its worker was never killed holding it", id, k)
		case k > 1:
			repeated++
		}
	}
	// asynq's view: all completed, none retried (a kill left to asynq's
	// lease recovery would show as a failed attempt).
	w.until("asynq to record every completion", waitTimeout, func([]streamEvent) bool {
		info, err := e.insp.GetQueueInfo(e.q)
		return err == nil && info.Completed == n
	})
	info, _ := e.insp.GetQueueInfo(e.q)
	if info.Pending+info.Active+info.Retry+info.Archived+info.Scheduled != 0 || info.Failed != 0 {
		t.Fatalf("queue after the run: %+v", info)
	}
	for page := 1; ; page++ {
		tasks, err := e.insp.ListCompletedTasks(e.q, asynq.PageSize(500), asynq.Page(page))
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) == 0 {
			break
		}
		for _, ti := range tasks {
			if ti.Retried != 0 || ti.LastErr != "" {
				t.Fatalf("task %s: retried %d, last error %q", ti.ID, ti.Retried, ti.LastErr)
			}
		}
	}
	t.Logf("%d jobs through 4 workers × 2 in %s with %d SIGKILLs: %d tasks requeued at once, %d completed more than once (killed after the handler finished, before asynq recorded it), 0 lost, 0 run twice at once, %d requeued:stale after the next processing",
		n, elapsed.Round(time.Millisecond), kills, len(requeued), repeated, outOfOrder)
}

// TestKillToPendingLatency measures the time from a worker's SIGKILL to its
// task being back in pending (docs/design.md: within 50 ms at p99), over 50
// kills on a real Redis (10 on miniredis). The clock stops when the
// requeued:stale event arrives, which Recover writes one round trip before
// the requeue (issue 20, recovery order). Only a generous bound is
// asserted.
func TestKillToPendingLatency(t *testing.T) {
	rounds := 10
	if testredis.Real() {
		rounds = 50
	}
	e := newQEnv(t)
	s := e.supervise(pool{workers: 1, crashRetries: 1000})
	w := e.watch()
	s.waitHealthy(w)
	id := e.enqueue(e.client(), "hold", "")
	count := func(seen []streamEvent, st queue.JobState) (n int, last queue.JobEvent) {
		for _, se := range seen {
			if se.ev.Topic == queue.JobTopic(e.q, id) && se.job.State == st {
				n, last = n+1, se.job
			}
		}
		return n, last
	}
	lat := make([]time.Duration, 0, rounds)
	for i := range rounds {
		var proc queue.JobEvent
		w.until("processing", waitTimeout, func(seen []streamEvent) bool {
			n, last := count(seen, queue.StateProcessing)
			proc = last
			return n > i
		})
		// The task is recorded before the handler starts: kill now.
		start := time.Now()
		kill(t, proc.PID)
		w.until("requeued:stale", waitTimeout, func(seen []streamEvent) bool {
			n, _ := count(seen, queue.StateRequeuedStale)
			return n > i
		})
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(10 * time.Microsecond) }
	t.Logf("SIGKILL → task back in pending (requeued:stale seen), %d kills: median %s, p90 %s, worst %s",
		len(lat), p(0.5), p(0.9), lat[len(lat)-1].Round(10*time.Microsecond))
	// A bound for a loaded machine: the defect this guards (the task left
	// to asynq's recovery of expired leases) takes 30 s or more; the
	// latency itself is reported by this test's log, which make bench reads (P7).
	if worst := lat[len(lat)-1]; worst > 10*time.Second {
		t.Fatalf("worst kill → pending %s", worst)
	}
}

// TestPausedPoolStaysReady: while paused, workers stay alive and idle, a
// worker that crashes is restarted as usual, and no task starts; resumed,
// the work flows.
func TestPausedPoolStaysReady(t *testing.T) {
	e := newQEnv(t)
	s := e.supervise(pool{workers: 2})
	w := e.watch()
	before := s.waitHealthy(w)
	ctx := context.Background()
	ctl := queue.NewControl(e.store)
	if _, _, err := ctl.PauseAll(ctx, []string{e.q}, queue.Actor{}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	var ids []string
	for range 4 {
		ids = append(ids, e.enqueue(c, "sleep", "1"))
	}
	kill(t, before[0].PID)
	w.until("the killed worker restarted", waitTimeout, func([]streamEvent) bool {
		cs := s.healthy()
		return len(cs) == 2 && !slices.ContainsFunc(cs, func(c health.Component) bool { return c.PID == before[0].PID })
	})
	// Two more heartbeats of each worker: alive, idle, and nothing started.
	mark := map[health.ComponentID]time.Time{}
	for _, c := range s.healthy() {
		mark[c.ID] = c.LastHeartbeat
	}
	for range 2 {
		w.until("heartbeats while paused", waitTimeout, func([]streamEvent) bool {
			for _, c := range s.healthy() {
				if !c.LastHeartbeat.After(mark[c.ID]) {
					return false
				}
			}
			for _, c := range s.healthy() {
				mark[c.ID] = c.LastHeartbeat
			}
			return true
		})
	}
	if runs := s.counts("runs"); len(runs) != 0 {
		t.Fatalf("tasks ran while paused: %v", runs)
	}
	if _, _, err := ctl.ResumeAll(ctx, []string{e.q}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		w.untilJob(id, queue.StateDone)
	}
}

// TestToxicJobSparesItsNeighbour (finding E12): a toxic task crashes its
// worker (concurrency 2) while a neighbour's handler runs beside it. Both
// were in flight, so the crash counts against both; but a task over its
// limit is archived as toxic only once it crashed a worker while it ran
// alone, and a task with a crash on record runs alone. The neighbour
// completes; the toxic task is archived after job_crash_retries + 1 runs.
func TestToxicJobSparesItsNeighbour(t *testing.T) {
	e := newQEnv(t)
	s := e.supervise(pool{workers: 1, concurrency: 2, crashRetries: 1})
	w := e.watch()
	s.waitHealthy(w)
	c := e.client()
	n := e.enqueue(c, "sleep", "400", asynq.TaskID("neighbour"), asynq.Retention(time.Hour))
	w.untilJob(n, processing)
	e.enqueue(c, "crash", "", asynq.TaskID("toxic"))
	w.untilJob("toxic", queue.StateToxic)
	w.untilJob(n, done)
	// The done event is written as the handler returns, before asynq marks
	// the task completed: wait for asynq's state, not a read right after.
	e.waitState(n, asynq.TaskStateCompleted, waitTimeout)
	if runs := s.counts("runs")["toxic"]; runs != 2 {
		t.Fatalf("toxic task ran %d times, want 2 (job_crash_retries 1)", runs)
	}
	if v := s.violations(); len(v) > 0 {
		t.Fatalf("tasks ran in two handlers at once: %v", v)
	}
}
