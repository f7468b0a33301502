package queue

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestRecoverPicksOnlyTheDeadProcessesActiveTasks builds the states a dead
// process can leave by hand and checks which tasks Recover puts back.
func TestRecoverPicksOnlyTheDeadProcessesActiveTasks(t *testing.T) {
	env := testredis.New(t)
	rdb := env.Client
	ctx := context.Background()
	q := testQueue(t, env, "rq")
	store := health.NewStore(rdb, env.Prefix, 0)
	keys := store.Keys()
	c := asynq.NewClientFromRedisClient(rdb)
	comp := health.ComponentID{Queue: q, Slot: 0}
	for _, id := range []string{"mine", "other", "nohook", "finished", "mine2"} {
		if _, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	// Dequeue in enqueue order, as the hook (with an owner) or as plain
	// asynq would.
	dequeue := func(owner string) string {
		t.Helper()
		keys4 := []string{asynqPendingKey(q), asynqPausedKey(q), asynqActiveKey(q), asynqLeaseKey(q)}
		lease := time.Now().Add(30 * time.Second).Unix()
		if owner == "" {
			if err := redis.NewScript(asynqDequeueSource).Run(ctx, rdb, keys4, lease, asynqTaskPrefix(q)).Err(); err != nil {
				t.Fatal(err)
			}
			return ""
		}
		res, err := vigilDequeueScript.Run(ctx, rdb, append(keys4, keys.DeadOwners(q)), lease, asynqTaskPrefix(q), ownerField, owner,
			keys.JobPrefix(q), health.JobCrashesSuffix, health.JobSoloCrashesSuffix, runField).Slice()
		if errors.Is(err, redis.Nil) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return res[1].(string)
	}
	dead, live := ownerOf(comp, 100), ownerOf(comp, 200)
	if id := dequeue(dead); id != "mine" {
		t.Fatalf("dequeued %q", id)
	}
	dequeue(live) // other: the replacement process runs it now
	dequeue("")   // nohook: no owner field, listed in the running hash
	dequeue(dead) // finished: done by the dead process before it died
	dequeue(dead) // mine2: dequeued, its handler not begun (no running entry)
	rdb.ZRem(ctx, asynqLeaseKey(q), "finished")
	rdb.LRem(ctx, asynqActiveKey(q), 0, "finished")
	rdb.HSet(ctx, keys.Running(comp), "mine", "100:1", "nohook", "100:2", "finished", "100:3", "other", "200:4")
	rdb.Set(ctx, keys.JobCrashes(q, "mine2"), 4, 0)

	r := NewRecoverer(store, RecovererConfig{Metrics: new(Metrics), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	n, err := r.Recover(ctx, comp, 100, true)
	if err != nil || n != 3 {
		t.Fatalf("Recover = %d, %v; want 3 (mine, nohook, mine2)", n, err)
	}
	pending := rdb.LRange(ctx, asynqPendingKey(q), 0, -1).Val()
	slices.Sort(pending)
	if !slices.Equal(pending, []string{"mine", "mine2", "nohook"}) {
		t.Fatalf("pending %v", pending)
	}
	if active := rdb.LRange(ctx, asynqActiveKey(q), 0, -1).Val(); !slices.Equal(active, []string{"other"}) {
		t.Fatalf("active %v; the live process's task must stay", active)
	}
	// A crash is counted for the tasks whose handler had begun; mine2 never
	// ran in the dead process: its counter is left as it was.
	for id, want := range map[string]string{"mine": "1", "nohook": "1", "mine2": "4", "other": "", "finished": ""} {
		if got := rdb.Get(ctx, keys.JobCrashes(q, id)).Val(); got != want {
			t.Errorf("crashes of %s = %q, want %q", id, got, want)
		}
	}
	// mine and nohook were in flight together: neither crash is solo.
	if n := rdb.Exists(ctx, keys.JobSoloCrashes(q, "mine"), keys.JobSoloCrashes(q, "nohook")).Val(); n != 0 {
		t.Error("a crash with two handlers in flight counted as solo")
	}
	if h := rdb.HGetAll(ctx, keys.Running(comp)).Val(); len(h) != 1 || h["other"] != "200:4" {
		t.Fatalf("running hash %v; only the live process's entry must stay", h)
	}
	var stale []string
	for _, m := range rdb.XRange(ctx, keys.Events(), "-", "+").Val() {
		for _, ee := range health.EntryEvents(m.Values) {
			if ee.Topic == TopicJobs {
				stale = append(stale, string(ee.Data))
			}
		}
	}
	if len(stale) != 3 {
		t.Fatalf("%d requeued:stale events, want 3: %v", len(stale), stale)
	}
	// A dequeue the dead process sent before it died, reaching Redis only
	// now (miniredis serves connections in no set order; a proxy can hold
	// a command), takes nothing: it would strand a task under a process
	// that is gone, left to asynq's lease recovery.
	if id := dequeue(dead); id != "" {
		t.Fatalf("the dead process's late dequeue took %q", id)
	}
	if got := rdb.LLen(ctx, asynqPendingKey(q)).Val(); got != 3 {
		t.Fatalf("%d tasks pending after the dead process's late dequeue, want 3", got)
	}
	if n, err := r.Recover(ctx, comp, 100, true); err != nil || n != 0 {
		t.Fatalf("second Recover = %d, %v", n, err)
	}
	if n, err := r.Recover(ctx, health.ComponentID{Queue: q, Slot: 1}, 100, true); err != nil || n != 0 {
		t.Fatalf("Recover of another component with the same pid = %d, %v", n, err)
	}
	// A process that dies with one handler in flight: its crash is solo.
	alone := ownerOf(comp, 300)
	if id := dequeue(alone); id == "" {
		t.Fatal("nothing to dequeue")
	} else {
		rdb.HSet(ctx, keys.Running(comp), id, "300:5")
		if n, err := r.Recover(ctx, comp, 300, true); err != nil || n != 1 {
			t.Fatalf("Recover of the lone handler's process = %d, %v", n, err)
		}
		if got := rdb.Get(ctx, keys.JobSoloCrashes(q, id)).Val(); got != "1" {
			t.Fatalf("solo crashes of %s = %q, want 1", id, got)
		}
	}
}

// TestRequeueEventBeforePending (issue 20, recovery order): when a dead
// process's task is pending again, its requeued:stale event, with the
// crash count the requeue leaves, is already on the stream: a worker that
// takes it at once cannot announce processing before it.
func TestRequeueEventBeforePending(t *testing.T) {
	rdb, store, q, comp := runningTask(t, "ro")
	ctx, keys := context.Background(), store.Keys()

	r := NewRecoverer(store, RecovererConfig{Metrics: new(Metrics), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	checked := false
	r.afterRequeue = func() {
		checked = true
		if got := rdb.LRange(ctx, asynqPendingKey(q), 0, -1).Val(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("pending %v at the seam", got)
		}
		var evs []JobEvent
		for _, m := range rdb.XRange(ctx, keys.Events(), "-", "+").Val() {
			if m.Values["topic"] == JobTopic(q, "a") {
				var ev health.Event
				if err := json.Unmarshal([]byte(m.Values["data"].(string)), &ev); err != nil {
					t.Fatal(err)
				}
				je, err := DecodeJobEvent(ev)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, je)
			}
		}
		if len(evs) != 1 || evs[0].State != StateRequeuedStale || evs[0].Crashes != 1 || evs[0].PID != 100 {
			t.Fatalf("events of the task once pending again: %+v; want its requeued:stale (1 crash, pid 100) already written", evs)
		}
	}
	if n, err := r.Recover(ctx, comp, 100, true); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	if !checked {
		t.Fatal("the seam was not reached")
	}
	if got := rdb.Get(ctx, keys.JobCrashes(q, "a")).Val(); got != "1" {
		t.Errorf("crashes %q, want 1", got)
	}
}

// TestRecoverAfterAStopCountsNoCrash: fault explorer E45 (miniredis seed
// 140082). An operator stopped a worker while Redis was paused; past its
// shutdown bound the worker severed its connections and could not put its
// task back, so the supervisor's recovery did, and counted a crash against
// it: with job_crash_retries 0 the task was then archived as toxic without
// its handler ever running. A process that was asked to stop did not
// crash: its tasks go back with their counters as they were.
func TestRecoverAfterAStopCountsNoCrash(t *testing.T) {
	rdb, store, q, comp := runningTask(t, "rs")
	ctx, keys := context.Background(), store.Keys()

	r := NewRecoverer(store, RecovererConfig{Metrics: new(Metrics), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if n, err := r.Recover(ctx, comp, 100, false); err != nil || n != 1 {
		t.Fatalf("Recover after a stop = %d, %v; want the task back", n, err)
	}
	if got := rdb.LRange(ctx, asynqPendingKey(q), 0, -1).Val(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("pending %v, want [a]", got)
	}
	if n := rdb.Exists(ctx, keys.JobCrashes(q, "a"), keys.JobSoloCrashes(q, "a")).Val(); n != 0 {
		t.Errorf("a stopped process's task counts a crash (%d counters)", n)
	}
	if h := rdb.HGetAll(ctx, keys.Running(comp)).Val(); len(h) != 0 {
		t.Errorf("running hash %v after the recovery", h)
	}
}

// runningTask enqueues task "a" on a queue of its own (named after name)
// and dequeues it as process 100 of the queue's slot 0 does, its handler
// begun (listed in the slot's running hash).
func runningTask(t *testing.T, name string) (*redis.Client, *health.Store, string, health.ComponentID) {
	t.Helper()
	env := testredis.New(t)
	rdb, ctx := env.Client, context.Background()
	q := testQueue(t, env, name)
	store := health.NewStore(rdb, env.Prefix, 0)
	keys := store.Keys()
	comp := health.ComponentID{Queue: q, Slot: 0}
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID("a")); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(30 * time.Second).Unix()
	if err := vigilDequeueScript.Run(ctx, rdb, []string{asynqPendingKey(q), asynqPausedKey(q), asynqActiveKey(q), asynqLeaseKey(q), keys.DeadOwners(q)},
		lease, asynqTaskPrefix(q), ownerField, ownerOf(comp, 100), keys.JobPrefix(q), health.JobCrashesSuffix,
		health.JobSoloCrashesSuffix, runField).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, keys.Running(comp), "a", "100:1")
	return rdb, store, q, comp
}
