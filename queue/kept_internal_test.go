package queue

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestKeptOutcomeOfAnEarlierRun: an outcome kept from one run of a task
// (its write ran but the reply was lost) must not land on a later run of
// the same task by the same process: a retry or requeue that did happen
// brings the task back, the same worker dequeues it again, and the owner
// guard alone (owner and state) would let the earlier run's outcome
// through, moving the task while its new run's handler is inside (and a
// completion the same way). Each dequeue now writes a run token the kept
// outcome must match.
func TestKeptOutcomeOfAnEarlierRun(t *testing.T) {
	env := testredis.New(t)
	rdb := env.Client
	ctx := context.Background()
	q := testQueue(t, env, "kq")
	keys := health.NewStore(rdb, env.Prefix, 0).Keys()
	c := asynq.NewClientFromRedisClient(rdb)
	defer c.Close()
	if _, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID("x")); err != nil {
		t.Fatal(err)
	}
	owner := ownerOf(health.ComponentID{Queue: q, Slot: 0}, 100)
	dequeue := func() int64 {
		t.Helper()
		res, err := vigilDequeueScript.Run(ctx, rdb,
			[]string{asynqPendingKey(q), asynqPausedKey(q), asynqActiveKey(q), asynqLeaseKey(q), keys.DeadOwners(q)},
			time.Now().Add(time.Minute).Unix(), asynqTaskPrefix(q), ownerField, owner,
			keys.JobPrefix(q), health.JobCrashesSuffix, health.JobSoloCrashesSuffix, runField).Slice()
		if err != nil || len(res) != 5 || res[1] != "x" {
			t.Fatalf("dequeue: %v %v", res, err)
		}
		return res[4].(int64)
	}
	run1 := dequeue()
	// Run 1's outcome: asynq's requeue, written, its reply lost: kept.
	requeue := outcomeScripts[sha1Hex(asynqRequeueSource)]
	rkeys := []string{asynqActiveKey(q), asynqLeaseKey(q), asynqPendingKey(q), asynqTaskPrefix(q) + "x"}
	if err := rdb.Eval(ctx, asynqRequeueSource, rkeys, "x").Err(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	k := newKeptOutcomes(owner, 0, new(Metrics), log, clock.Real{})
	k.keep(keptOutcome{id: "x", script: requeue, keys: rkeys, args: []any{"x"}, since: time.Now(), run: run1})
	// Run 2: the same process dequeues the task again.
	if run2 := dequeue(); run2 == run1 {
		t.Fatalf("two dequeues wrote the same run token %d", run2)
	}
	res, err := k.flush(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if res.written != 0 || res.stale != 1 {
		t.Fatalf("flush %+v: run 1's outcome must be stale for run 2", res)
	}
	if st := rdb.HGet(ctx, asynqTaskPrefix(q)+"x", "state").Val(); st != "active" {
		t.Fatalf("run 2's task is %q: run 1's requeue moved it", st)
	}
}
