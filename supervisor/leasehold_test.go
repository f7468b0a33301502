package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestExitAfterTheLeaseBrokeIsNotCounted (fault explorer E18, seed 40052):
// a host cut off from Redis keeps its worker running; its lease lapses and
// another host on the same machine takes the slot over, which stops the
// cut-off host's process (SIGTERM, then SIGKILL at stop_timeout). Redis then
// loses its data, and the cut-off host, back, takes the vanished lease
// again. The exit of its worker, whenever it comes (while cut off, or once
// the lease was taken again) and however (a clean exit, a SIGKILL), is the
// other host's doing, not a crash: nothing is counted (invariant 5), and
// the slot runs again here, once, after the lease is renewed.
//
// E41 (redis-server seed 120743): the lease need not lapse. Redis lost it
// with its data well within a lease, the other host took the slot at once,
// and the cut-off host, which had renewed its lease a moment before, saw
// its worker exit and counted a crash.
func TestExitAfterTheLeaseBrokeIsNotCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode string
		cutOff     bool // the exit while cut off, else once the lease is taken again
		lapse      bool // the lease lapses, else Redis loses it within a lease
		// jobCrash: its tasks count a crash. Not the worker's crash, but
		// a violent exit may be its task's (a crash job's): a SIGKILL is
		// counted against the tasks, a clean exit is not (E45).
		jobCrash bool
	}{
		{"clean exit while cut off", "beat", true, true, false},
		{"killed once the lease is taken again", "ignore-term", false, true, true},
		{"clean exit while cut off, the lease lost with the data", "beat", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			h, p, direct := proxiedHarness(t, supervisor.Config{
				Recoverer:   rec,
				Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, tc.mode}}},
				Policy:      shortBackoff,
				Lease:       clusterLease,
				StopTimeout: time.Second,
				OpTimeout:   300 * time.Millisecond,
			})
			id := health.ComponentID{Queue: "q"}
			h.start()
			before := h.waitFor(id, isStatus(health.StatusHealthy))
			pid := before.PID
			mine := health.LeaseValue(h.cfg.Host, h.cfg.Instance)
			ctx := context.Background()
			rdb, slot := direct.Client(), direct.Keys().Slot(id)

			mark := h.logs.mark()
			p.Refuse(true)
			p.Cut()
			h.logs.wait(t, mark, waitTimeout, "redis unreachable")
			if tc.lapse {
				// The lease lapses (its remaining life is the wait).
				ttl, err := rdb.PTTL(ctx, slot).Result()
				if err != nil {
					t.Fatal(err)
				}
				<-time.After(ttl + 20*time.Millisecond)
				if v, err := rdb.Get(ctx, slot).Result(); !errors.Is(err, redis.Nil) {
					t.Fatalf("lease %q (%v) after its expiry", v, err)
				}
			} else {
				loseData(t, rdb, h.cfg.Prefix)
			}
			// Another host takes the slot over, as adopt does for a lost
			// host's process on its machine: lease, record, SIGTERM.
			if err := rdb.Set(ctx, slot, health.LeaseValue(thiefHost, thiefInstance), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			writeRecord(t, direct, health.Component{ID: id, Status: health.StatusCrashed, Host: thiefHost,
				Instance: thiefInstance, PID: pid, Reason: "host h1 lost: stopping its process"})
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			exited := "pid=" + strconv.Itoa(pid)
			if tc.cutOff {
				h.logs.wait(t, mark, waitTimeout, "component="+id.String(), exited, "exit_code=0")
			}
			// Redis loses its data: the other host's lease and record go.
			loseData(t, rdb, h.cfg.Prefix)
			mark = h.logs.mark()
			p.Refuse(false)
			h.logs.wait(t, mark, waitTimeout, "redis reachable again")
			if !tc.cutOff {
				// This host takes the vanished lease again at its next
				// renewal; then the other host's SIGKILL lands.
				for deadline := time.Now().Add(waitTimeout); ; {
					if v, _ := rdb.Get(ctx, slot).Result(); v == mine {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the lease was never taken again")
					}
					<-time.After(10 * time.Millisecond) // polling Redis for another goroutine's write
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				h.logs.wait(t, mark, waitTimeout, "component="+id.String(), exited, "exit_code=")
			}
			c := waitFor(t, direct, id, func(c health.Component) bool {
				return c.Status == health.StatusHealthy && c.PID != pid && c.Instance == h.cfg.Instance
			})
			if c.Restarts.LifetimeRestarts != 0 || c.Restarts.RestartCount != 0 {
				t.Errorf("the other host's stop counted as a crash: %s", describe(c))
			}
			if v, _ := rdb.Get(ctx, slot).Result(); v != mine {
				t.Errorf("lease %q, want this host's %q", v, mine)
			}
			if want := (recovered{id, pid, tc.jobCrash}); !slices.Contains(rec.asked(), want) {
				t.Errorf("recoveries %v, want %v", rec.asked(), want)
			}
		})
	}
}

// loseData deletes every key of prefix, as a Redis that lost its data
// (FLUSHALL on a Redis of the test's own; the prefix's keys on a shared
// one).
func loseData(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
