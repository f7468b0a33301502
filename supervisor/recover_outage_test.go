package supervisor_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// activeTask makes task id of queue q active under process pid of
// component c, as a worker's dequeue leaves it (asynq v0.26.0's layout,
// queue.AsynqVersion, and Vigil's owner field), and returns a func that
// reads the task's state.
func activeTask(t *testing.T, rdb redis.UniversalClient, c health.ComponentID, pid int, id string) func() string {
	t.Helper()
	ctx := context.Background()
	pfx := "asynq:{" + c.Queue + "}:"
	key := pfx + "t:" + id
	pipe := rdb.TxPipeline()
	pipe.HSet(ctx, key, "state", "active", "vigil_owner", c.String()+":"+strconv.Itoa(pid))
	pipe.LPush(ctx, pfx+"active", id)
	pipe.ZAdd(ctx, pfx+"lease", redis.Z{Score: float64(time.Now().Add(time.Hour).Unix()), Member: id})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), key, pfx+"active", pfx+"lease", pfx+"pending") })
	return func() string {
		st, err := rdb.HGet(context.Background(), key, "state").Result()
		if err != nil {
			t.Fatalf("read task %s: %v", id, err)
		}
		return st
	}
}

// TestReleasedDuringOutageRecoveredWhenRedisIsBack (fault explorer E20,
// seed 109): a worker whose slot is being released (its pool shrank to 0)
// exits while Redis is cut off, with a task still active under its pid.
// Its requeue cannot be written then; the worker is forgotten (the slot is
// released) — and yet, once Redis answers again, the task is put back at
// once, not left active until asynq's lease recovery.
func TestReleasedDuringOutageRecoveredWhenRedisIsBack(t *testing.T) {
	t.Parallel()
	rec := &lateRecoverer{}
	// asynq's keys carry no test prefix: a queue of the test's own.
	q := "e20" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h, p, direct := proxiedHarness(t, supervisor.Config{
		// The worker ignores SIGTERM: its release lasts stop_timeout,
		// time to cut Redis before it ends.
		Pools:       []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{testWorker, "ignore-term"}}},
		Policy:      longBackoff,
		Lease:       clusterLease,
		StopTimeout: 2 * time.Second,
		OpTimeout:   300 * time.Millisecond,
		Recoverer:   rec,
	})
	// The supervisor's own store: its recoveries go through the proxy.
	rec.r = queue.NewRecoverer(h.store, queue.RecovererConfig{Logger: h.cfg.Logger})
	killStrays(t, h.cfg.Prefix)
	id := health.ComponentID{Queue: q}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	state := activeTask(t, direct.Client(), id, pid, "task-1")

	mark := h.logs.mark()
	if err := supervisor.SetPoolSize(context.Background(), direct, q, 0); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, mark, waitTimeout, `msg="releasing slot"`, "component="+id.String())
	p.Refuse(true)
	p.Cut()
	// The SIGKILL at stop_timeout ends the release while Redis is away.
	h.logs.wait(t, mark, waitTimeout, `msg="worker stopped"`, "component="+id.String())
	if st := state(); st != "active" {
		t.Fatalf("task state %q while Redis was cut off from the supervisor, want active", st)
	}
	mark = h.logs.mark()
	p.Refuse(false)
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	// At once: asynq's lease recovery would take the task's lease (an
	// hour here); the supervisor puts it back as soon as Redis answers.
	h.logs.wait(t, mark, 5*time.Second, `msg="requeued running tasks"`, "pid="+strconv.Itoa(pid))
	if st := state(); st != "pending" {
		t.Errorf("task state %q once Redis answered again, want pending", st)
	}
}

// lateRecoverer is a Recoverer set once the harness exists (it needs the
// harness's store).
type lateRecoverer struct{ r *queue.Recoverer }

func (l *lateRecoverer) Recover(ctx context.Context, id health.ComponentID, pid int, crashed bool) (int, error) {
	return l.r.Recover(ctx, id, pid, crashed)
}

// A slot released because its pool shrank, whose worker ends while Redis
// is cut off, is still removed once Redis answers again (issue 20's
// cleanup, E20's outage): the release's last writes (the record stopped,
// then the slot's keys removed) were refused, and the worker forgotten. It
// used to stay listed as stopping, with its keys, for good: no host holds
// a slot beyond its pool to clean it up.
func TestShrunkDuringOutageRemovedWhenRedisIsBack(t *testing.T) {
	t.Parallel()
	q := "e20r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h, p, direct := proxiedHarness(t, supervisor.Config{
		// The worker ignores SIGTERM: its release lasts stop_timeout,
		// time to cut Redis before it ends.
		Pools:       []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{testWorker, "ignore-term"}}},
		Policy:      longBackoff,
		Lease:       clusterLease,
		StopTimeout: 2 * time.Second,
		OpTimeout:   300 * time.Millisecond,
	})
	killStrays(t, h.cfg.Prefix)
	id := health.ComponentID{Queue: q}
	h.start()
	h.waitFor(id, isStatus(health.StatusHealthy))

	mark := h.logs.mark()
	if err := supervisor.SetPoolSize(context.Background(), direct, q, 0); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, mark, waitTimeout, `msg="releasing slot"`, "component="+id.String())
	p.Refuse(true)
	p.Cut()
	h.logs.wait(t, mark, waitTimeout, `msg="worker stopped"`, "component="+id.String())
	mark = h.logs.mark()
	p.Refuse(false)
	h.logs.wait(t, mark, waitTimeout, "redis reachable again")
	deadline := time.Now().Add(waitTimeout)
	for {
		ids, err := direct.IDs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ids, id) {
			break
		}
		if time.Now().After(deadline) {
			c, _ := direct.Get(context.Background(), id)
			t.Fatalf("%s still listed %v after Redis answered again: %s (%s)", id, waitTimeout, c.Status, c.Reason)
		}
		select {
		case <-time.After(20 * time.Millisecond): // polling Redis, not waiting for a goroutine
		case <-t.Context().Done():
			return
		}
	}
	h.sync()
	assertGone(t, direct, id)
}
