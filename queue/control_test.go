package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// asynqPaused reports whether asynq has queue q paused.
func (e *qenv) asynqPaused(q string) bool {
	e.tb.Helper()
	info, err := e.insp.GetQueueInfo(q)
	if err != nil {
		return e.Client.Exists(context.Background(), "asynq:{"+q+"}:paused").Val() == 1
	}
	return info.Paused
}

func TestPauseScopesCombine(t *testing.T) {
	e := newQEnv(t)
	other := e.q + "b"
	t.Cleanup(func() {
		if e.Mini == nil {
			deleteAsynqQueue(e.Client, other)
		}
	})
	ctl := queue.NewControl(e.store)
	ctx := context.Background()
	all := []string{e.q, other}
	who := queue.Actor{Who: "ann", Why: "deploy"}
	step := func(name string, act func() (string, error), wantOut string, wantPaused map[string]bool) {
		t.Helper()
		out, err := act()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out != wantOut {
			t.Fatalf("%s: outcome %q, want %q", name, out, wantOut)
		}
		st, err := ctl.State(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range wantPaused {
			if got := e.asynqPaused(q); got != want {
				t.Fatalf("%s: asynq says %s paused=%v, want %v", name, q, got, want)
			}
			if st.Paused(q) != want {
				t.Fatalf("%s: Vigil says %s paused=%v, want %v", name, q, st.Paused(q), want)
			}
		}
	}
	all1 := func(outs map[string]string, _ bool, err error) (string, error) { return outs[e.q], err }
	step("pause queue", func() (string, error) { return ctl.PauseQueue(ctx, e.q, who) }, queue.OutPaused, map[string]bool{e.q: true, other: false})
	if p := mustState(t, ctl, all).Queues[e.q]; p.By != queue.PausedByVigil || p.Who != "ann" || p.Why != "deploy" || p.Since.IsZero() {
		t.Fatalf("pause record = %+v", p)
	}
	step("pause it again", func() (string, error) { return ctl.PauseQueue(ctx, e.q, who) }, queue.OutAlready, map[string]bool{e.q: true, other: false})
	step("pause all", func() (string, error) { return all1(ctl.PauseAll(ctx, all, who)) }, queue.OutScopeAdded, map[string]bool{e.q: true, other: true})
	step("pause all again", func() (string, error) { return all1(ctl.PauseAll(ctx, all, who)) }, queue.OutAlready, map[string]bool{e.q: true, other: true})
	if !mustState(t, ctl, all).Global {
		t.Fatal("global pause not reported")
	}
	// Global resume leaves a queue paused on its own paused.
	step("resume all", func() (string, error) { return all1(ctl.ResumeAll(ctx, all)) }, queue.OutScopeRemoved, map[string]bool{e.q: true, other: false})
	step("resume all again", func() (string, error) { return all1(ctl.ResumeAll(ctx, all)) }, queue.OutOtherScope, map[string]bool{e.q: true, other: false})
	step("resume queue", func() (string, error) { return ctl.ResumeQueue(ctx, e.q) }, queue.OutResumed, map[string]bool{e.q: false, other: false})
	step("resume queue again", func() (string, error) { return ctl.ResumeQueue(ctx, e.q) }, queue.OutNotPaused, map[string]bool{e.q: false, other: false})
	// A queue resumed on its own stays paused while the global pause holds.
	step("pause all", func() (string, error) { return all1(ctl.PauseAll(ctx, all, who)) }, queue.OutPaused, map[string]bool{e.q: true})
	step("resume queue under global pause", func() (string, error) { return ctl.ResumeQueue(ctx, e.q) }, queue.OutOtherScope, map[string]bool{e.q: true})
	step("resume all", func() (string, error) { return all1(ctl.ResumeAll(ctx, all)) }, queue.OutResumed, map[string]bool{e.q: false, other: false})
	if mustState(t, ctl, all).Global {
		t.Fatal("global pause reported after resume")
	}
	if _, err := ctl.PauseQueue(ctx, "bad:name", who); err == nil {
		t.Fatal("PauseQueue accepted a bad name")
	}
}

func mustState(tb testing.TB, ctl *queue.Control, queues []string) queue.PauseState {
	tb.Helper()
	st, err := ctl.State(ctx0, queues)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

var ctx0 = context.Background()

// TestPauseAsynqIsTheTruth: asynq's key is the one truth, both ways. A
// pause made with asynq's Inspector shows as paused by asynq; a Vigil
// pause lifted with the Inspector shows as running; a host starting
// (Apply) never lifts or re-makes a pause; Vigil's resume says what it
// did.
func TestPauseAsynqIsTheTruth(t *testing.T) {
	e := newQEnv(t)
	ctl := queue.NewControl(e.store)
	qs := []string{e.q}
	who := queue.Actor{Who: "ann"}
	e.enqueue(e.client(), "x", "") // asynq knows the queue

	// asynq pauses → Vigil shows it, by asynq, and a restart keeps it.
	if err := e.insp.PauseQueue(e.q); err != nil {
		t.Fatal(err)
	}
	if p := mustState(t, ctl, qs).Queues[e.q]; !p.Paused || p.By != queue.PausedByAsynq || p.Since.IsZero() {
		t.Fatalf("asynq's pause reads %+v", p)
	}
	if err := queue.NewControl(e.store).Apply(ctx0, qs); err != nil {
		t.Fatal(err)
	}
	if !e.asynqPaused(e.q) {
		t.Fatal("a host starting lifted asynq's pause")
	}
	// Vigil's global pause leaves it as it is, and so does the global resume.
	if outs, _, err := ctl.PauseAll(ctx0, qs, who); err != nil || outs[e.q] != queue.OutAsynqPaused {
		t.Fatalf("PauseAll over asynq's pause: %v, %v", outs, err)
	}
	if outs, _, err := ctl.ResumeAll(ctx0, qs); err != nil || outs[e.q] != queue.OutAsynqKept || !e.asynqPaused(e.q) {
		t.Fatalf("ResumeAll over asynq's pause: %v, %v", outs, err)
	}
	// A queue resume lifts it, and says whose pause it was.
	if out, err := ctl.ResumeQueue(ctx0, e.q); err != nil || out != queue.OutAsynqResumed || e.asynqPaused(e.q) {
		t.Fatalf("ResumeQueue of asynq's pause: %q, %v", out, err)
	}
	if info, err := e.insp.GetQueueInfo(e.q); err != nil || info.Paused {
		t.Fatalf("asynq still says paused: %+v, %v", info, err)
	}

	// Vigil pauses → asynq sees it; asynq unpauses → Vigil shows running,
	// a restart does not pause it again, and Vigil's resume says so.
	if out, err := ctl.PauseQueue(ctx0, e.q, who); err != nil || out != queue.OutPaused {
		t.Fatalf("PauseQueue: %q, %v", out, err)
	}
	if info, err := e.insp.GetQueueInfo(e.q); err != nil || !info.Paused {
		t.Fatalf("asynq does not see Vigil's pause: %+v, %v", info, err)
	}
	if err := queue.NewControl(e.store).Apply(ctx0, qs); err != nil || !e.asynqPaused(e.q) {
		t.Fatalf("a host starting lifted Vigil's pause: %v", err)
	}
	if err := e.insp.UnpauseQueue(e.q); err != nil {
		t.Fatal(err)
	}
	if p := mustState(t, ctl, qs).Queues[e.q]; p.Paused || p.By != "" {
		t.Fatalf("after asynq's unpause Vigil reads %+v", p)
	}
	if err := queue.NewControl(e.store).Apply(ctx0, qs); err != nil || e.asynqPaused(e.q) {
		t.Fatalf("a host starting paused the queue again: %v", err)
	}
	if out, err := ctl.ResumeQueue(ctx0, e.q); err != nil || out != queue.OutStale {
		t.Fatalf("ResumeQueue after asynq's unpause: %q, %v", out, err)
	}
	// asynq re-pausing after lifting Vigil's pause is asynq's pause.
	if _, err := ctl.PauseQueue(ctx0, e.q, who); err != nil {
		t.Fatal(err)
	}
	if err := e.insp.UnpauseQueue(e.q); err != nil {
		t.Fatal(err)
	}
	e.Client.Set(ctx0, "asynq:{"+e.q+"}:paused", "1", 0) // another second than Vigil's
	if p := mustState(t, ctl, qs).Queues[e.q]; !p.Paused || p.By != queue.PausedByAsynq {
		t.Fatalf("asynq's re-pause reads %+v", p)
	}
}

// TestPauseMigratesFlags: the control-hash flags of earlier releases
// become records beside asynq's key, so that Vigil's resume lifts them.
func TestPauseMigratesFlags(t *testing.T) {
	e := newQEnv(t)
	ctl := queue.NewControl(e.store)
	other := e.q + "b"
	t.Cleanup(func() {
		if e.Mini == nil {
			deleteAsynqQueue(e.Client, other)
		}
	})
	qs := []string{e.q, other}
	// As an earlier release left it: flags, and asynq's keys set.
	e.Client.HSet(ctx0, e.store.Keys().Control(), "worker_enabled", "false", "paused:"+e.q, "true")
	e.Client.Set(ctx0, "asynq:{"+e.q+"}:paused", "1700000000", 0)
	e.Client.Set(ctx0, "asynq:{"+other+"}:paused", "1700000000", 0)
	if err := ctl.Apply(ctx0, qs); err != nil {
		t.Fatal(err)
	}
	st := mustState(t, ctl, qs)
	if !st.Global || st.Queues[e.q].By != queue.PausedByVigil || !st.Queues[e.q].Has(queue.ScopeQueue) || !st.Queues[other].Has(queue.ScopeGlobal) {
		t.Fatalf("migrated state %+v", st)
	}
	if e.Client.HExists(ctx0, e.store.Keys().Control(), "paused:"+e.q).Val() {
		t.Fatal("legacy flag kept")
	}
	if _, _, err := ctl.ResumeAll(ctx0, qs); err != nil {
		t.Fatal(err)
	}
	if !e.asynqPaused(e.q) || e.asynqPaused(other) {
		t.Fatal("global resume after migration")
	}
}

// TestPauseWithJobsInFlight: paused, in-flight jobs finish, nothing new
// starts while the worker keeps heartbeating; resumed, work restarts.
func TestPauseWithJobsInFlight(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	cfg.Env.Concurrency = 2
	idle := make(chan struct{}, 1000) // a dequeue found nothing
	queue.SetTestHooks(&cfg, nil, func(got bool) {
		if !got {
			select {
			case idle <- struct{}{}:
			default:
			}
		}
	})
	release := make(chan struct{})
	started := make(chan string, 10)
	e.runWorker(cfg, map[string]asynq.Handler{
		"block": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			started <- id
			<-release
			return nil
		}),
		"quick": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			started <- id
			return nil
		}),
	})
	ctx := context.Background()
	ctl := queue.NewControl(e.store)
	c := e.client()
	w := e.watch()
	a, b := e.enqueue(c, "block", ""), e.enqueue(c, "block", "")
	receive(t, started)
	receive(t, started)

	if _, changed, err := ctl.PauseAll(ctx, []string{e.q}, queue.Actor{}); err != nil || !changed {
		t.Fatalf("PauseAll: %v, %v", changed, err)
	}
	later := []string{e.enqueue(c, "quick", ""), e.enqueue(c, "quick", ""), e.enqueue(c, "quick", "")}
	close(release)
	w.untilJob(a, queue.StateDone)
	w.untilJob(b, queue.StateDone)

	// Drain the idle signals from before, then watch ten empty dequeues.
	for len(idle) > 0 {
		<-idle
	}
	before := e.lastHeartbeat(cfg.Env.Component)
	for range 10 {
		receive(t, idle)
	}
	select {
	case id := <-started:
		t.Fatalf("task %s started while paused", id)
	default:
	}
	info, err := e.insp.GetQueueInfo(e.q)
	if err != nil || info.Pending != 3 || info.Active != 0 {
		t.Fatalf("paused queue: %+v, %v; want 3 pending, none active", info, err)
	}
	// Alive and healthy: its heartbeat kept coming.
	w.until("a heartbeat while paused", waitTimeout, func([]streamEvent) bool {
		return e.lastHeartbeat(cfg.Env.Component).After(before)
	})
	if comp, err := e.store.Get(ctx, cfg.Env.Component); err != nil || comp.Status != health.StatusHealthy {
		t.Fatalf("worker while paused: %+v, %v", comp, err)
	}

	if _, changed, err := ctl.ResumeAll(ctx, []string{e.q}); err != nil || !changed {
		t.Fatalf("ResumeAll: %v, %v", changed, err)
	}
	for _, id := range later {
		w.untilJob(id, queue.StateDone)
	}
}

func (e *qenv) lastHeartbeat(id health.ComponentID) time.Time {
	e.tb.Helper()
	c, err := e.store.Get(context.Background(), id)
	if err != nil {
		e.tb.Fatalf("read %s: %v", id, err)
	}
	return c.LastHeartbeat
}
