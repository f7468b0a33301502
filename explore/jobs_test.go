package explore

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/vigil-dev/vigil/internal/testledger"
)

// The ledger's two-handlers report is a violation, the first owner a
// worker shutting down included (finding E8).
func TestJudgeTwoHandlers(t *testing.T) {
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil)}
	v := ledgerView{
		violations: []string{"j1 started in 200 while 100 runs it", "j2 started in 300 while 101 runs it"},
		exits:      map[string]string{"100": "clean:0"},
	}
	if _, err := w.judgeJobs(func() (ledgerView, error) { return v, nil }); err != nil {
		t.Fatal(err)
	}
	vs := w.v.all()
	if len(vs) != 2 || vs[0].Invariant != 7 || vs[1].Invariant != 7 {
		t.Fatalf("violations %v", vs)
	}
}

// E13 (seed 10014): a job whose later run was still in its handler when the
// seed's jobs were judged. waitJobs took it for done (its earlier run's
// outcome "could not be written", its host having been cut from Redis), the
// judge read the ledger, the run completed, and asynq's "completed" read
// after it had no completion in that ledger read: "asynq says completed,
// its handler never succeeded" — for a job its handler did complete. A run
// in progress is now never taken for done, and the judge reads asynq
// before the ledger.
func TestJudgeJobCompletingDuringTheJudgement(t *testing.T) {
	m, rdb, w, c := newJobsWorld(t)
	ctx := context.Background()
	at := time.Now()
	if _, err := c.Enqueue(asynq.NewTask("sleep", []byte("50")), asynq.Queue("a"), asynq.TaskID("j1"), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	w.jobs.byID["j1"] = &jobRec{id: "j1", queue: "a", typ: "sleep", at: at, retriedAtRuns: -1}
	w.jobs.order = []string{"j1"}
	w.b.blip("", "redis outage") // every host cut from Redis once

	// Run 1, in a process gone since, ended canceled (its worker shut down).
	gone := testledger.NewWriter(rdb, "L:", 1<<22+1) // above pid_max: no such process
	if err := gone.Hello(ctx, "worker:a:0", "h0"); err != nil {
		t.Fatal(err)
	}
	if err := gone.Start(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if err := gone.End(ctx, "j1", testledger.OutcomeCanceled); err != nil {
		t.Fatal(err)
	}
	// Run 2, in this (live) process, inside its handler now: active in asynq.
	live := testledger.NewWriter(rdb, "L:", os.Getpid())
	if err := live.Hello(ctx, "worker:a:1", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := live.Start(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	m.Lpop("asynq:{a}:pending")
	m.Lpush("asynq:{a}:active", "j1")
	m.HSet("asynq:{a}:t:j1", "state", "active")

	if done, left, _ := w.jobsDone(); done {
		t.Fatalf("a job whose handler runs now taken for done (%d left)", left)
	}
	before, err := w.readLedger() // what the judge used to read first
	if err != nil {
		t.Fatal(err)
	}
	// Run 2 completes: the ledger first, then asynq.
	if err := live.End(ctx, "j1", testledger.OutcomeOK); err != nil {
		t.Fatal(err)
	}
	m.Del("asynq:{a}:active")
	if _, err := m.ZAdd("asynq:{a}:completed", float64(time.Now().Add(time.Hour).Unix()), "j1"); err != nil {
		t.Fatal(err)
	}
	m.HSet("asynq:{a}:t:j1", "state", "completed")
	if done, _, _ := w.jobsDone(); !done {
		t.Fatal("a completed job not taken for done")
	}
	st, err := w.judgeJobs(w.readLedger)
	if err != nil {
		t.Fatal(err)
	}
	if vs := w.v.all(); len(vs) != 0 || st.Completed != 1 {
		t.Fatalf("completed %d, violations %v", st.Completed, vs)
	}

	// The invariant still bites: asynq completed, no completion in the
	// ledger read after it.
	w.v = &verdict{}
	if _, err := w.judgeJobs(func() (ledgerView, error) { return before, nil }); err != nil {
		t.Fatal(err)
	}
	if vs := w.v.all(); len(vs) != 1 || vs[0].Invariant != 7 || !strings.Contains(vs[0].Evidence, "never succeeded") {
		t.Fatalf("violations %v", vs)
	}
}

// A task dequeued and never begun is left to asynq's lease recovery only
// when its owner died with its host: a live owner puts it back itself (the
// stranded sweep after a lost reply), so it is not excused.
func TestAwaitingLeaseNeverBegun(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil), rdb: rdb}
	j := jobRec{id: "j1", queue: "a", typ: "sleep", at: time.Now(), retriedAtRuns: -1}
	w.b.blip("", "redis outage")
	dead := 1<<22 + 1 // above pid_max
	v := ledgerView{procs: map[string]string{strconv.Itoa(os.Getpid()): "worker:a:0 h0", strconv.Itoa(dead): "worker:a:1 h1"}}

	m.HSet("asynq:{a}:t:j1", "state", "active", "vigil_owner", "worker:a:0:"+strconv.Itoa(os.Getpid()))
	if w.awaitingLease(v, j) {
		t.Fatal("a task stranded under a live owner excused")
	}
	m.HSet("asynq:{a}:t:j1", "vigil_owner", "worker:a:1:"+strconv.Itoa(dead))
	if w.awaitingLease(v, j) {
		t.Fatal("a dead owner's task excused though its host lived (its supervisor requeues it)")
	}
	w.b.close(w.b.open("h1", whyKilled))
	if !w.awaitingLease(v, j) {
		t.Fatal("a task whose owner died with its host not excused")
	}
}

// A job its handler completed but asynq still shows active is excused only
// when its worker died with its host (the kept outcome died with it): a
// worker that lives writes what it kept once Redis answers.
func TestJudgeCompletedStillActive(t *testing.T) {
	m, rdb, w, c := newJobsWorld(t)
	ctx := context.Background()
	if _, err := c.Enqueue(asynq.NewTask("sleep", []byte("1")), asynq.Queue("a"), asynq.TaskID("j1"), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	w.jobs.byID["j1"] = &jobRec{id: "j1", queue: "a", typ: "sleep", at: time.Now(), retriedAtRuns: -1}
	w.jobs.order = []string{"j1"}
	w.b.blip("", "redis outage")
	live := testledger.NewWriter(rdb, "L:", os.Getpid())
	for _, err := range []error{live.Hello(ctx, "worker:a:0", "h0"), live.Start(ctx, "j1"), live.End(ctx, "j1", testledger.OutcomeOK)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	m.Lpop("asynq:{a}:pending")
	m.Lpush("asynq:{a}:active", "j1")
	m.HSet("asynq:{a}:t:j1", "state", "active", "vigil_owner", "worker:a:0:"+strconv.Itoa(os.Getpid()))
	if _, err := m.ZAdd("asynq:{a}:lease", float64(time.Now().Add(30*time.Second).Unix()), "j1"); err != nil {
		t.Fatal(err)
	}
	if done, _, _ := w.jobsDone(); done {
		t.Fatal("a completed job still active under a live worker taken for done")
	}
	if _, err := w.judgeJobs(w.readLedger); err != nil {
		t.Fatal(err)
	}
	vs := w.v.all()
	if len(vs) != 1 || vs[0].Invariant != 7 || !strings.Contains(vs[0].Evidence, "still shows it active") {
		t.Fatalf("violations %v", vs)
	}
	// What tells E56's cases apart once the seed's Redis is gone: where
	// the task stands in asynq's structures, and whether its owner lives.
	for _, want := range []string{"run by " + strconv.Itoa(os.Getpid()) + " worker:a:0 on h0 alive", `state="active"`, "active list at 0", "lease ends in", "owner " + strconv.Itoa(os.Getpid()) + " alive"} {
		if !strings.Contains(vs[0].Evidence, want) {
			t.Errorf("evidence lacks %q: %s", want, vs[0].Evidence)
		}
	}
	// A task whose hash says active but which is in no active list (an
	// outcome script that removed it and failed after) is named as such.
	m.Del("asynq:{a}:active")
	if facts := w.activeFacts(*w.jobs.byID["j1"]); !strings.Contains(facts, "active list: redis: nil") {
		t.Errorf("facts %s", facts)
	}
}

// E35 (seed 95659): a task's last run was in one process, and another
// took it since (requeued, dequeued again, never begun): its owner field
// names the process that holds it now, and that one is judged. A crash
// job ran in h2's worker, which crashed (h2 requeued it); h1's worker
// dequeued it during a Redis pause and died with h1 (SIGKILL) before its
// handler began: left to asynq's lease recovery (docs/design.md §11), excused.
// The judge took the last run's process (h2's, whose host lived) and
// failed the seed. The other way round, a task whose last run's process
// died with its host but that a live process holds now is not excused.
func TestAwaitingLeaseJudgesTheOwnerNotTheLastRun(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil), rdb: rdb}
	j := jobRec{id: "j7", queue: "a", typ: "crash", at: time.Now(), retriedAtRuns: -1}
	ran, took := 1<<22+1, 1<<22+2 // above pid_max: gone
	v := ledgerView{
		runners: map[string][]int{"j7": {ran}},
		procs:   map[string]string{strconv.Itoa(ran): "worker:a:1 h2", strconv.Itoa(took): "worker:a:0 h1", strconv.Itoa(os.Getpid()): "worker:a:0 h0"},
	}
	w.b.close(w.b.open("h1", whyKilled))

	m.HSet("asynq:{a}:t:j7", "state", "active", "vigil_owner", "worker:a:0:"+strconv.Itoa(took))
	if !w.awaitingLease(v, j) {
		t.Error("a task whose owner died with its host not excused (its last run was another process's, whose host lived)")
	}
	v.runners["j7"] = []int{took}
	m.HSet("asynq:{a}:t:j7", "vigil_owner", "worker:a:0:"+strconv.Itoa(os.Getpid()))
	if w.awaitingLease(v, j) {
		t.Error("a task a live process holds excused (its last run's process died with its host)")
	}
}

// E35 (seed 95659): a worker that outlived its SIGKILLed host and exited
// is the explorer's child (its subreaper) until the explorer reaps it: a
// zombie, dead as far as its tasks go. The judge took it for alive and
// did not excuse the task it left active.
func TestAwaitingLeaseZombieOwnerIsDead(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	zombie := cmd.Process.Pid
	// Wait for its exit without reaping it (WNOWAIT): a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, zombie, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if _, state, _, ok := stat(zombie); !ok || state != 'Z' {
		t.Fatalf("pid %d: state %c, want a zombie", zombie, state)
	}
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil), rdb: rdb}
	j := jobRec{id: "j8", queue: "a", typ: "sleep", at: time.Now(), retriedAtRuns: -1}
	v := ledgerView{runners: map[string][]int{"j8": {zombie}}, procs: map[string]string{strconv.Itoa(zombie): "worker:a:0 h1"}}
	m.HSet("asynq:{a}:t:j8", "state", "active", "vigil_owner", "worker:a:0:"+strconv.Itoa(zombie))
	w.b.close(w.b.open("h1", whyKilled))
	if !w.awaitingLease(v, j) {
		t.Error("a task whose owner died with its host (a zombie now) not excused")
	}
}

// waitJobs judges a queue nobody serves at its budget, goes on past it
// while the jobs progress (seed 180517 in CI: a slow machine ran the same
// jobs, only later), and stops at twice the budget however they progress.
func TestWaitJobsGoesOnWhileTheJobsProgress(t *testing.T) {
	_, rdb, w, c := newJobsWorld(t)
	ctx := context.Background()
	if _, err := c.Enqueue(asynq.NewTask("sleep", []byte("50")), asynq.Queue("a"), asynq.TaskID("j1")); err != nil {
		t.Fatal(err)
	}
	w.jobs.byID["j1"] = &jobRec{id: "j1", queue: "a", typ: "sleep", at: time.Now(), retriedAtRuns: -1}
	w.jobs.order = []string{"j1"}
	lw := testledger.NewWriter(rdb, "L:", os.Getpid())
	if err := lw.Hello(ctx, "worker:a:0", "h0"); err != nil {
		t.Fatal(err)
	}

	// runs starts a run of j1 every 50 ms until stop, and completes the
	// last one if complete.
	runs := func(stop <-chan struct{}, complete bool) <-chan error {
		errc := make(chan error, 1)
		go func() {
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					if complete {
						errc <- lw.End(ctx, "j1", testledger.OutcomeOK)
						return
					}
					errc <- nil
					return
				case <-tk.C:
					if err := lw.Start(ctx, "j1"); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
		return errc
	}

	const budget, stall = 300 * time.Millisecond, 300 * time.Millisecond

	// Nothing runs j1: judged at the budget, not done.
	start := time.Now()
	if w.waitJobs(budget, stall) {
		t.Fatal("a job nobody runs taken for done")
	}
	if took := time.Since(start); took > budget+stall+time.Second {
		t.Fatalf("a queue standing still waited %s past its budget of %s", took-budget, budget)
	}

	// j1 runs again and again, and is done after 1.5 budgets: waitJobs
	// goes on past the budget and sees it done.
	stop := make(chan struct{})
	errc := runs(stop, true)
	timer := time.AfterFunc(budget*3/2, func() { close(stop) })
	defer timer.Stop()
	if !w.waitJobs(budget, stall) {
		t.Error("a job that progressed past the budget and was done before twice the budget was judged not done")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// A second job runs forever: judged not done at twice the budget.
	if _, err := c.Enqueue(asynq.NewTask("sleep", []byte("50")), asynq.Queue("a"), asynq.TaskID("j2")); err != nil {
		t.Fatal(err)
	}
	w.jobs.byID["j2"] = &jobRec{id: "j2", queue: "a", typ: "sleep", at: time.Now(), retriedAtRuns: -1}
	w.jobs.order = append(w.jobs.order, "j2")
	stop = make(chan struct{})
	errc = runs(stop, false)
	start = time.Now()
	done := w.waitJobs(budget, stall)
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if done {
		t.Fatal("a job never done taken for done")
	}
	if took := time.Since(start); took > 2*budget+time.Second {
		t.Fatalf("jobs progressing forever waited %s, more than twice their budget of %s", took, budget)
	}
}

// newJobsWorld is a world judging jobs on a miniredis: asynq's inspector
// and a client for it, the ledger's reader, nothing else.
func newJobsWorld(t *testing.T) (*miniredis.Miniredis, *redis.Client, *world, *asynq.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil), rdb: rdb,
		insp: asynq.NewInspectorFromRedisClient(rdb), lr: testledger.NewReader(rdb, "L:")}
	c := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = c.Close(); _ = w.insp.Close() })
	return m, rdb, w, c
}

// Seed 297380: an operator cancelled an active hang job between its dequeue
// and its handler's start (the handler waits for its running record); asynq
// archived it "context canceled" with no run in the ledger. That is the
// cancel's effect, not a lost job; the same archive without a cancel is
// still a violation.
func TestJudgeCancelledBeforeItsHandler(t *testing.T) {
	_, _, w, c := newJobsWorld(t)
	if _, err := c.Enqueue(asynq.NewTask("hang", nil), asynq.Queue("b"), asynq.TaskID("j1"), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(w.rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{"b": 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	// What the worker's middleware returns when the cancel came first.
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return context.Canceled })); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := w.insp.GetTaskInfo("b", "j1")
		if err == nil && info.State == asynq.TaskStateArchived {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("j1 not archived in 10 s: %v %v", info, err)
		}
		time.Sleep(5 * time.Millisecond) // polls asynq's state, which has no signal to wait on
	}
	srv.Shutdown()
	judge := func(cancelled bool) (JobStats, []Violation) {
		w.v = &verdict{}
		w.jobs = newJobBook()
		w.jobs.byID["j1"] = &jobRec{id: "j1", queue: "b", typ: "hang", at: time.Now(), retriedAtRuns: -1, cancelled: cancelled}
		w.jobs.order = []string{"j1"}
		st, err := w.judgeJobs(w.readLedger)
		if err != nil {
			t.Fatal(err)
		}
		return st, w.v.all()
	}
	if _, vs := judge(false); len(vs) != 1 || vs[0].Invariant != 7 || !strings.Contains(vs[0].Evidence, "without having run") {
		t.Fatalf("archived unrun with no cancel: violations %v, want invariant 7", vs)
	}
	if st, vs := judge(true); len(vs) != 0 || st.CancelledUnrun != 1 {
		t.Fatalf("archived unrun after a cancel: violations %v, cancelled-unrun %d; want none and 1", vs, st.CancelledUnrun)
	}
}
