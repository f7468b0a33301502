package supervisor_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestRecoveryCompletesOnASlowLink (fault explorer E56, candidate read of
// seed 231553 on a machine at load 17-23): a dead worker's tasks are put
// back by Recover, several round trips. On a link where each round trip
// takes a third of op_timeout, each call of the monitor fits its
// op_timeout, but a recovery given one op_timeout for all its calls never
// does: it failed, marked Redis down, was retried when Redis "came back",
// failed again, and the task stayed active under the dead pid (with the
// host's ticks held while Redis counted as down).
func TestRecoveryCompletesOnASlowLink(t *testing.T) {
	t.Parallel()
	rec := &lateRecoverer{}
	q := "e56" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const opTimeout = 300 * time.Millisecond
	h, p, direct := proxiedHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		OpTimeout: opTimeout,
		Recoverer: rec,
		Heartbeat: supervisor.Heartbeat{Interval: 250 * time.Millisecond, TTL: 5 * time.Second},
	})
	rec.r = queue.NewRecoverer(h.store, queue.RecovererConfig{Logger: h.cfg.Logger})
	id := health.ComponentID{Queue: q}
	h.start()
	pid := h.waitFor(id, isStatus(health.StatusHealthy)).PID
	state := activeTask(t, direct.Client(), id, pid, "task-1")

	p.Delay(opTimeout / 3)
	mark := h.logs.mark()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, mark, waitTimeout, `msg="worker crashed"`, "pid="+strconv.Itoa(pid))
	deadline := time.Now().Add(waitTimeout)
	for st := state(); st != "pending"; st = state() {
		if time.Now().After(deadline) {
			t.Fatalf("task state %q %s after its worker's crash, want pending", st, waitTimeout)
		}
		<-time.After(50 * time.Millisecond) // polling Redis, not waiting for a goroutine
	}
}

// TestRedisBackOnASlowLink: a Redis that answers every call within
// op_timeout is back, however slow its round trips. The probe after an
// outage (a PING on a new connection, then a write) had one op_timeout for
// all its calls: on a link whose round trip took more than half of it,
// Redis was never found back, and the host held its state in memory for
// good, judging no heartbeat and starting nothing (E56).
//
// The client makes no handshake of RESP3 or identity (a round trip
// each). The first call after the outage takes hs round trips: its first
// try meets a connection of the outage's and go-redis tries again on a new
// one (2), with SELECT first on a test Redis's numbered database (3). The
// link's round trip is set midway between op_timeout/(hs+1) (the old
// probe's PING and write, hs+1 round trips, never fit) and op_timeout/hs
// (each call fits).
func TestRedisBackOnASlowLink(t *testing.T) {
	t.Parallel()
	const opTimeout = 600 * time.Millisecond
	hs := 2
	h, p, _ := proxiedHarnessWith(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy:    longBackoff,
		OpTimeout: opTimeout,
		Heartbeat: supervisor.Heartbeat{Interval: 250 * time.Millisecond, TTL: 5 * time.Second},
	}, func(o *redis.Options) {
		o.Protocol, o.DisableIdentity = 2, true
		if o.DB != 0 {
			hs = 3
		}
	})
	h.start()
	h.waitFor(health.ComponentID{Queue: "q"}, isStatus(health.StatusHealthy))
	mark := h.logs.mark()
	p.Refuse(true)
	p.Cut()
	h.logs.wait(t, mark, waitTimeout, `msg="redis unreachable`)
	mark = h.logs.mark()
	// Midway: 250 ms (hs 2), 175 ms (hs 3).
	p.Delay(opTimeout * time.Duration(2*hs+1) / time.Duration(2*hs*(hs+1)))
	p.Refuse(false)
	h.logs.wait(t, mark, waitTimeout, `msg="redis reachable again"`)
}
