package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// leaderHeard records what a supervisor's OnLeader hook hears.
type leaderHeard struct{ ch chan leaderNews }

type leaderNews struct {
	leading bool
	until   time.Time
	at      time.Time
}

func (l leaderHeard) hook(leading bool, until time.Time) {
	select {
	case l.ch <- leaderNews{leading, until, time.Now()}:
	default:
	}
}

// next waits for the next news that says leading (or not).
func (l leaderHeard) next(tb testing.TB, leading bool) leaderNews {
	tb.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case n := <-l.ch:
			if n.leading == leading {
				return n
			}
		case <-deadline:
			tb.Fatalf("OnLeader did not hear leading=%v within %s", leading, waitTimeout)
		}
	}
}

// The leader step tells the hook who leads and until when; a host that
// stops says it no longer leads before it releases the lease, and the
// other host hears that it leads.
func TestOnLeader(t *testing.T) {
	env := testredis.New(t)
	heard := map[string]leaderHeard{}
	hosts := map[string]*harness{}
	for _, h := range []string{"a", "b"} {
		l := leaderHeard{make(chan leaderNews, 1000)}
		heard[h] = l
		hosts[h] = newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
			Host: h, Lease: clusterLease, OnLeader: l.hook,
			Pools: []supervisor.Pool{{Queue: "q", Workers: 0, Command: []string{testWorker, "beat"}}},
		})
	}
	hosts["a"].start()
	n := heard["a"].next(t, true)
	if d := n.until.Sub(n.at); d <= 0 || d > clusterLease {
		t.Errorf("a leads until %s after it heard so; the lease is %s", d, clusterLease)
	}
	hosts["b"].start()
	heard["b"].next(t, false)
	if err := hosts["a"].sup.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	heard["a"].next(t, false)
	heard["b"].next(t, true)
}
