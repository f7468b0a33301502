package queue

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestLeaseRecoveryLeavesLiveOwnersAlone: asynq's recoverer (which every
// worker runs, first at its start) finds tasks whose lease expired long
// ago. It may take those no live process owns (the owner's record names
// another pid, or there is no owner field), but not one whose owner's
// record names it alive: that process runs it, keeps its outcome, or
// requeues it once Redis answers. Before, asynq moved it to retry as a
// failed attempt, and it could run twice.
func TestLeaseRecoveryLeavesLiveOwnersAlone(t *testing.T) {
	env := testredis.New(t)
	rdb := env.Client
	ctx := context.Background()
	q := testQueue(t, env, "lq")
	store := health.NewStore(rdb, env.Prefix, 0)
	keys := store.Keys()
	c := asynq.NewClientFromRedisClient(rdb)
	for _, id := range []string{"live", "replaced", "nohook"} {
		if _, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID(id), asynq.MaxRetry(5)); err != nil {
			t.Fatal(err)
		}
	}
	keys4 := []string{asynqPendingKey(q), asynqPausedKey(q), asynqActiveKey(q), asynqLeaseKey(q)}
	expired := time.Now().Add(-5 * time.Minute).Unix()
	owned := func(owner string) {
		t.Helper()
		if err := vigilDequeueScript.Run(ctx, rdb, append(keys4, keys.DeadOwners(q)), expired, asynqTaskPrefix(q), ownerField, owner,
			keys.JobPrefix(q), health.JobCrashesSuffix, health.JobSoloCrashesSuffix, runField).Err(); err != nil {
			t.Fatal(err)
		}
	}
	a, b := health.ComponentID{Queue: q, Slot: 0}, health.ComponentID{Queue: q, Slot: 1}
	owned(ownerOf(a, 111)) // live: a's record names pid 111, healthy
	owned(ownerOf(b, 222)) // replaced: b's record names pid 333 now
	if err := redis.NewScript(asynqDequeueSource).Run(ctx, rdb, keys4, expired, asynqTaskPrefix(q)).Err(); err != nil {
		t.Fatal(err) // nohook: dequeued by plain asynq, no owner field
	}
	rdb.HSet(ctx, keys.Component(a), health.FieldPID, 111, health.FieldStatus, string(health.StatusHealthy))
	rdb.HSet(ctx, keys.Component(b), health.FieldPID, 333, health.FieldStatus, string(health.StatusHealthy))

	var logs testlog.Buffer
	m := new(Metrics)
	wenv := health.WorkerEnv{RedisURL: env.URL, Prefix: env.Prefix, Component: health.ComponentID{Queue: q, Slot: 2},
		Host: "h1", Concurrency: 1, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 2 * time.Second,
		ShutdownTimeout: time.Second, JobCrashRetries: 2, ScratchDir: t.TempDir()}
	wctx, cancel := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() {
		exited <- RunWorker(wctx, WorkerConfig{Env: wenv, Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			RetryDelay: func(int, error, *asynq.Task) time.Duration { return time.Hour }},
			map[string]asynq.Handler{"t": asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })})
	}()
	defer func() {
		cancel()
		if err := <-exited; err != nil {
			t.Errorf("RunWorker: %v", err)
		}
	}()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	state := func(id string) asynq.TaskState {
		info, err := insp.GetTaskInfo(q, id)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		return info.State
	}
	// The recoverer runs as the worker starts: it takes the two, in one
	// pass with the one it leaves alone.
	deadline := time.Now().Add(30 * time.Second)
	for state("replaced") != asynq.TaskStateRetry || state("nohook") != asynq.TaskStateRetry {
		if time.Now().After(deadline) {
			t.Fatalf("asynq's recoverer took nothing: replaced %v, nohook %v\n%s", state("replaced"), state("nohook"), logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling what asynq's recoverer writes
	}
	if st := state("live"); st != asynq.TaskStateActive {
		t.Fatalf("the live owner's task is %v, want active", st)
	}
	if n := m.LeaseRecoverySkips.Load(); n != 1 {
		t.Fatalf("lease recovery skips %d, want 1", n)
	}
	if !strings.Contains(logs.String(), "asynq's lease recovery takes a task no live process owns") {
		t.Fatalf("no log line for the tasks taken:\n%s", logs.String())
	}
}
