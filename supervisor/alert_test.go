package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// alerts records what the supervisor alerts.
type alerts chan alertMsg

type alertMsg struct {
	kind string
	ev   health.Event
}

func (a alerts) Notify(kind string, ev any) bool {
	e, _ := ev.(health.Event)
	select {
	case a <- alertMsg{kind, e}:
		return true
	default:
		return false
	}
}

func TestAlertWhenAWorkerTurnsFailed(t *testing.T) {
	a := make(alerts, 10)
	h := newHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "exit", "3"}}},
		Policy: policy.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxInWindow: 2},
		Alerts: a,
	})
	h.start()
	id := health.ComponentID{Queue: "q", Slot: 0}
	h.waitFor(id, isStatus(health.StatusFailed))
	m := receive(t, a, waitTimeout, "the worker_failed alert")
	if m.kind != "worker_failed" || m.ev.Type != health.EventWorker || m.ev.Topic != id.Topic() ||
		m.ev.Worker == nil || m.ev.Worker.Status != string(health.StatusFailed) {
		t.Fatalf("alert %s %+v", m.kind, m.ev)
	}
	if m.ev.Worker.ExitCode == nil || *m.ev.Worker.ExitCode != 3 || m.ev.Worker.FailureReason == "" {
		t.Fatalf("alert does not say why: %+v", m.ev.Worker)
	}
	select {
	case m := <-a:
		t.Fatalf("a second alert: %+v", m)
	default:
	}
}

// The leader alerts once for a host whose record expired, and not for a host
// that stopped gracefully.
func TestAlertWhenAHostIsLost(t *testing.T) {
	a := make(alerts, 10)
	env := testredis.New(t)
	ctx := context.Background()
	// "bye" runs and stops gracefully first.
	bye := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{Host: "bye", Lease: clusterLease})
	bye.start()
	if err := bye.sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{Lease: clusterLease, Alerts: a})
	// "gone" was seen a minute ago, and its record has expired.
	past := float64(time.Now().Add(-time.Minute).UnixMilli())
	if err := h.rdb.ZAdd(ctx, h.store.Keys().Hosts(), redis.Z{Score: past, Member: "gone"}).Err(); err != nil {
		t.Fatal(err)
	}
	h.start()
	m := receive(t, a, waitTimeout, "the host_lost alert")
	if m.kind != "host_lost" || m.ev.Topic != "host:gone:status" || m.ev.Type != health.EventHost {
		t.Fatalf("alert %s %+v", m.kind, m.ev)
	}
	// Two more leader ticks: no second alert, none for bye.
	r := newEventReader(t, h.store)
	deadline := time.Now().Add(3 * clusterLease)
	for time.Now().Before(deadline) {
		r.next(deadline)
	}
	select {
	case m := <-a:
		t.Fatalf("another alert: %s %+v", m.kind, m.ev)
	default:
	}
}
