package queue_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// TestShutdownBoundedWithoutRedis (finding E10): a worker told to stop
// (its supervisor died: the parent-death signal) while Redis does not
// answer returns within its shutdown timeout + 1 s, whether Redis refuses
// connections or holds every reply (a paused server). Nothing it held is
// lost: the task it ran stays active under its owner field, for the
// owner-scoped requeue once the process is gone.
func TestShutdownBoundedWithoutRedis(t *testing.T) {
	for _, fault := range []string{"refused", "stalled"} {
		t.Run(fault, func(t *testing.T) {
			e := newQEnv(t)
			cfg := e.config(0)
			cfg.Env.ShutdownTimeout = 200 * time.Millisecond
			p := e.viaProxy(&cfg)
			r := newRuns()
			stop := e.runWorker(cfg, map[string]asynq.Handler{
				"hold": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
					id, _ := asynq.GetTaskID(ctx)
					r.add(id)
					<-ctx.Done()
					return ctx.Err()
				}),
			})
			w := e.watch()
			id := e.enqueue(e.client(), "hold", "", asynq.Retention(time.Hour))
			w.untilJob(id, processing)
			switch fault {
			case "refused":
				p.Refuse(true)
				p.Cut()
			case "stalled":
				p.Stall(true)
				defer p.Stall(false)
			}
			begin := time.Now()
			_ = stop()
			bound := cfg.Env.ShutdownTimeout + time.Second
			if took := time.Since(begin); took > bound {
				t.Fatalf("RunWorker returned %s after its context ended with Redis %s; want ≤ %s", took.Round(time.Millisecond), fault, bound)
			}
			p.Stall(false)
			p.Refuse(false)
			info, err := e.insp.GetTaskInfo(e.q, id)
			if err != nil {
				t.Fatal(err)
			}
			if info.State == asynq.TaskStateActive {
				// Left for the owner-scoped requeue: as the supervisor does
				// once it reaped the process.
				n, err := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log}).Recover(context.Background(), cfg.Env.Component, os.Getpid(), true)
				if err != nil {
					t.Fatalf("recover the task left active: %v", err)
				}
				if n != 1 {
					// The stalled proxy forwards what the worker sent before
					// it severed its connections once the stall ends: its
					// hand-back may land between the read above and the
					// recovery (seen on a real Redis). Then the task is no
					// longer active, and the wait below shows it pending.
					if info, err := e.insp.GetTaskInfo(e.q, id); err != nil || info.State == asynq.TaskStateActive {
						t.Fatalf("recover the task left active: %d recovered, task %v (%v)", n, info, err)
					}
				}
			}
			e.waitState(id, asynq.TaskStatePending, waitTimeout)
		})
	}
}

// overlap records whether two handlers were ever inside one task at once.
type overlap struct {
	mu      sync.Mutex
	inside  map[string]int
	overlap []string
}

func (o *overlap) enter(id, who string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inside == nil {
		o.inside = map[string]int{}
	}
	if o.inside[id] > 0 {
		o.overlap = append(o.overlap, who+" entered "+id+" while another handler was inside")
	}
	o.inside[id]++
}

func (o *overlap) leave(id string) {
	o.mu.Lock()
	o.inside[id]--
	o.mu.Unlock()
}

func (o *overlap) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.overlap...)
}

// TestShutdownNeverHandsBackARunningHandler (finding E8): at its shutdown
// timeout asynq puts a task whose handler still runs back to pending, and
// cancels the handler only after: another worker could take the task while
// the first handler was still inside it. Now the handler is cancelled
// first and the task is handed back only once it returned; one that does
// not return within a grace stays active under the stopping process, for
// the supervisor's owner-scoped requeue once that process is gone. Its
// running record stays too: if the process then dies violently (the
// handler crashed it on its way out), the requeue counts that crash
// against the task (explorer seed 150168: the record was deleted, no crash
// was counted, and a crash job ran once more than job_crash_retries
// allows); if it ends cleanly, nothing is counted.
func TestShutdownNeverHandsBackARunningHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaves  bool // the handler heeds the cancel
		crashed bool // else: the process then dies violently
	}{
		{"handler leaves on cancel", true, false},
		{"handler stays, clean exit", false, false},
		{"handler stays, violent exit", false, true},
	} {
		leaves := tc.leaves
		t.Run(tc.name, func(t *testing.T) {
			e := newQEnv(t)
			var o overlap
			bStarted := make(chan struct{})
			aIn := make(chan struct{})  // A's handler is inside the task
			aOut := make(chan struct{}) // and has left it
			var bOnce sync.Once
			release := make(chan struct{}) // lets a staying handler go
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			cfgA := e.config(0)
			cfgA.Env.ShutdownTimeout = time.Millisecond
			stopA := e.runWorker(cfgA, map[string]asynq.Handler{
				"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
					id, _ := asynq.GetTaskID(ctx)
					o.enter(id, "A")
					defer close(aOut)
					defer o.leave(id)
					close(aIn)
					<-ctx.Done()
					if !leaves {
						select { // a handler that does not heed its context
						case <-release:
						case <-bStarted:
						}
					}
					return ctx.Err()
				}),
			})
			w := e.watch()
			id := e.enqueue(e.client(), "job", "", asynq.Retention(time.Hour))
			w.untilJob(id, processing)
			receive(t, aIn)
			cfgB := e.config(1)
			e.runWorker(cfgB, map[string]asynq.Handler{
				"job": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
					id, _ := asynq.GetTaskID(ctx)
					o.enter(id, "B")
					defer o.leave(id)
					bOnce.Do(func() { close(bStarted) })
					return nil
				}),
			})
			if err := stopA(); err != nil {
				t.Fatal(err)
			}
			if !leaves {
				// Still active under A (asynq's requeue leaves the owner
				// field: a pending task, or one B took, fails this).
				h := e.Client.HGetAll(context.Background(), "asynq:{"+e.q+"}:t:"+id).Val()
				if owner := cfgA.Env.Component.String() + ":" + strconv.Itoa(os.Getpid()); h["state"] != "active" || h["vigil_owner"] != owner {
					t.Fatalf("task whose handler stayed: state %q owner %q; want it left active under %s (overlaps: %v)",
						h["state"], h["vigil_owner"], owner, o.seen())
				}
				if running := e.Client.HGet(context.Background(), e.store.Keys().Running(cfgA.Env.Component), id).Val(); running == "" {
					t.Fatal("the running record of a handler still inside its task is gone")
				}
				close(release)
				receive(t, aOut) // as the process's exit would end it
				// The supervisor, once it reaped the process.
				n, err := queue.NewRecoverer(e.store, queue.RecovererConfig{Logger: e.log}).Recover(context.Background(), cfgA.Env.Component, os.Getpid(), tc.crashed)
				if err != nil || n != 1 {
					t.Fatalf("recover the task left active: %d, %v", n, err)
				}
				if left := e.Client.HLen(context.Background(), e.store.Keys().Running(cfgA.Env.Component)).Val(); left != 0 {
					t.Errorf("%d running records left after the recovery", left)
				}
			}
			crashes := 0
			if !leaves {
				// As the requeue counted it (B's success clears the counter).
				crashes = w.untilJob(id, queue.StateRequeuedStale).Crashes
			}
			receive(t, bStarted)
			w.untilJob(id, done)
			if got := o.seen(); len(got) > 0 {
				t.Fatalf("two handlers inside one task: %v", got)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.crashed]; crashes != want {
				t.Fatalf("crashes counted against the task: %d, want %d", crashes, want)
			}
			if leaves {
				if n := e.Client.Exists(context.Background(), e.store.Keys().JobCrashes(e.q, id)).Val(); n != 0 {
					t.Fatal("a crash was counted for a task handed back at shutdown")
				}
			}
		})
	}
}
