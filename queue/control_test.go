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

func TestPauseFlagsCombine(t *testing.T) {
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
	step := func(name string, act func() (bool, error), wantChanged bool, wantPaused map[string]bool) {
		t.Helper()
		changed, err := act()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if changed != wantChanged {
			t.Fatalf("%s: changed %v, want %v", name, changed, wantChanged)
		}
		for q, want := range wantPaused {
			if got := e.asynqPaused(q); got != want {
				t.Fatalf("%s: asynq says %s paused=%v, want %v", name, q, got, want)
			}
			st, _ := ctl.State(ctx)
			if st.Paused(q) != want {
				t.Fatalf("%s: flags say %s paused=%v, want %v", name, q, st.Paused(q), want)
			}
		}
	}
	step("pause queue", func() (bool, error) { return ctl.PauseQueue(ctx, e.q) }, true, map[string]bool{e.q: true, other: false})
	step("pause it again", func() (bool, error) { return ctl.PauseQueue(ctx, e.q) }, false, map[string]bool{e.q: true, other: false})
	step("pause all", func() (bool, error) { return ctl.PauseAll(ctx, all) }, true, map[string]bool{e.q: true, other: true})
	step("pause all again", func() (bool, error) { return ctl.PauseAll(ctx, all) }, false, map[string]bool{e.q: true, other: true})
	// Global resume leaves a queue paused on its own paused.
	step("resume all", func() (bool, error) { return ctl.ResumeAll(ctx, all) }, true, map[string]bool{e.q: true, other: false})
	step("resume all again", func() (bool, error) { return ctl.ResumeAll(ctx, all) }, false, map[string]bool{e.q: true, other: false})
	step("resume queue", func() (bool, error) { return ctl.ResumeQueue(ctx, e.q) }, true, map[string]bool{e.q: false, other: false})
	step("resume queue again", func() (bool, error) { return ctl.ResumeQueue(ctx, e.q) }, false, map[string]bool{e.q: false, other: false})
	// A queue resumed on its own stays paused while the global pause holds.
	step("pause all", func() (bool, error) { return ctl.PauseAll(ctx, all) }, true, map[string]bool{e.q: true})
	step("resume queue under global pause", func() (bool, error) { return ctl.ResumeQueue(ctx, e.q) }, false, map[string]bool{e.q: true})

	// The flags live in Redis: a host starting later (another Control)
	// applies them even if asynq's state was changed behind its back.
	if err := e.insp.UnpauseQueue(e.q); err != nil {
		t.Fatal(err)
	}
	if err := queue.NewControl(e.store).Apply(ctx, all); err != nil {
		t.Fatal(err)
	}
	if !e.asynqPaused(e.q) || !e.asynqPaused(other) {
		t.Fatal("Apply did not restore the pause from the flags")
	}
	if _, err := ctl.PauseQueue(ctx, "bad:name"); err == nil {
		t.Fatal("PauseQueue accepted a bad name")
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

	if changed, err := ctl.PauseAll(ctx, []string{e.q}); err != nil || !changed {
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

	if changed, err := ctl.ResumeAll(ctx, []string{e.q}); err != nil || !changed {
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
