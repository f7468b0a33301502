package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// state is pid's state letter in /proc (0: no such process).
func state(pid int) byte {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) {
		return stat[i+2]
	}
	return 0
}

// otherSpelling returns another URL of the Redis url names.
func otherSpelling(t *testing.T, url string) string {
	t.Helper()
	if strings.Contains(url, "?") {
		t.Fatalf("test Redis URL %q has a query already", url)
	}
	return url + "?dial_timeout=5s"
}

// gone reports whether pid has exited (no such process, or a zombie).
func gone(pid int) bool { st := state(pid); return st == 0 || st == 'Z' }

// TestFrozenOrphanDiesWhenAnotherHostTakesItsSlot: a worker is frozen
// (SIGSTOP), then its supervisor SIGKILLed: the parent-death SIGTERM stays
// pending on a stopped process. Adopted by init, its process group would be
// orphaned and the kernel would send it SIGHUP and SIGCONT; adopted by a
// subreaper of the same session (a supervisor, the fault explorer) it is
// not, and it would live forever. Another host on
// the same machine takes the slot over once the lease expired: it stops
// that process (SIGKILL ends a stopped one) and starts the slot only once
// it is gone, never two processes at once (fault explorer E16, seed
// 20208). Host a reaches the same Redis by another URL than host c's
// workers do (the explorer's hosts each through a proxy of its own): the
// process is c's all the same (59d36eb required the same URL, and the
// explorer found two processes for a slot at once, seed 1034 at ten seeds
// at a time).
func TestFrozenOrphanDiesWhenAnotherHostTakesItsSlot(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	id := health.ComponentID{Queue: "q"}
	c := startHostProcess(t, env, "c", 1, clusterLease)
	old := waitFor(t, store, id, isStatus(health.StatusHealthy)).PID
	// Host a runs (in this process: a subreaper, in the same session as
	// host c's workers, as the explorer is) before c dies.
	a := newHarnessOn(t, env.Client, otherSpelling(t, env.URL), env.Prefix, supervisor.Config{
		Host: "a", Lease: clusterLease, StopTimeout: time.Second,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	a.start()
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(old, syscall.SIGKILL) })
	for deadline := time.Now().Add(waitTimeout); state(old) != 'T'; {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d not stopped by SIGSTOP (state %q)", old, state(old))
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	if gone(old) {
		t.Fatalf("the frozen worker %d died with its supervisor: the test tests nothing", old)
	}

	ev := newEventReader(t, store)
	now := waitFor(t, store, id, func(c health.Component) bool {
		return c.Status == health.StatusHealthy && c.Host == "a"
	})
	if !gone(old) {
		t.Errorf("slot started here (pid %d) while the frozen orphan %d lives", now.PID, old)
	}
	deadline := time.Now().Add(waitTimeout)
	for !gone(old) && time.Now().Before(deadline) {
		ev.next(time.Now().Add(100 * time.Millisecond)) // polling another process's /proc entry
	}
	if !gone(old) {
		t.Fatalf("the frozen orphan %d of host c still lives after host a took its slot", old)
	}
	if now.Restarts.LifetimeRestarts != 0 {
		t.Errorf("takeover counted: %s", describe(now))
	}
}

// TestRestartedHostKillsItsFrozenOrphanAtOnce (fault explorer E19, seed
// 20208 two seeds at a time): a host's supervisor is SIGKILLed and started
// again as a new instance of the same host, which adopts its slot while the
// earlier instance's worker still lives. A worker frozen (SIGSTOP) acts on
// no signal but SIGKILL and does no work: it is killed at once, whether it
// was frozen before the adopt or while the new instance waits for it, not
// after stop_timeout (invariant 2: no process outlives its supervisor by
// more than stop_timeout + 1 s, and a stall before the adopt eats into
// that). The slot starts once it is gone, no restart counted.
func TestRestartedHostKillsItsFrozenOrphanAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode string
		before     bool // frozen before its supervisor dies, else while waited for
	}{
		{"frozen before the adopt", "beat", true},
		{"frozen while waited for", "ignore-term", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, store, id, old := orphanOfKilledHost(t, tc.mode, tc.before)
			// The same host again, in this process (a subreaper of the
			// same session, as the explorer is), with a stop_timeout far
			// longer than the wait allowed below.
			again := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
				Host: "c", Lease: clusterLease, StopTimeout: 5 * time.Second,
				Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
				Policy: shortBackoff,
			})
			ev := newEventReader(t, store)
			again.start()
			if tc.before {
				// Killed as the next instance joins (E34), before any adopt.
				again.logs.wait(t, 0, waitTimeout, "a worker of this host's previous instance is frozen: killing it", "pid="+strconv.Itoa(old))
			} else {
				again.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(old))
			}
			if !tc.before {
				if gone(old) {
					t.Fatalf("the worker %d, which ignores SIGTERM, is gone before it was frozen: the test tests nothing", old)
				}
				freeze(t, old)
			}
			frozen := time.Now()
			for deadline := frozen.Add(time.Second); !gone(old); {
				if time.Now().After(deadline) {
					t.Fatalf("the frozen orphan %d still lives %s after it was frozen and adopted over (stop_timeout %s)",
						old, time.Since(frozen).Round(time.Millisecond), again.cfg.StopTimeout)
				}
				<-time.After(5 * time.Millisecond) // polling another process's /proc entry
			}
			t.Logf("the frozen orphan was gone %s after it was frozen and adopted over", time.Since(frozen).Round(time.Millisecond))
			now := ev.waitFor(store, id, func(c health.Component) bool {
				return c.Status == health.StatusHealthy && c.PID != old
			})
			if now.Restarts.LifetimeRestarts != 0 {
				t.Errorf("the host's own restart counted: %s", describe(now))
			}
		})
	}
}

// freeze SIGSTOPs pid and waits until it is stopped, or gone: a stopped
// process dies only of SIGKILL, which a supervisor watching for frozen
// processes may send before a poll here sees the stop (under load). Its
// zombie may stay: it is not a child of this process's supervisors' spawns.
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(waitTimeout); state(pid) != 'T' && !gone(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d not stopped by SIGSTOP (state %q)", pid, state(pid))
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
}

// TestRestartedHostKillsFrozenOrphansOfSlotsItDoesNotTake: fault explorer
// E34 (redis-server seed 94415). A host's supervisor was SIGKILLed with one
// of its workers frozen; its next instance took the host's other slots but
// not that one, which went to another host a lease and a tick later: the
// frozen orphan outlived its supervisor by 3 s (invariant 2: stop_timeout
// + 1 s). The next instance kills its predecessor's frozen workers as it
// joins, whichever slots it takes. Here its pool is empty: it takes none.
func TestRestartedHostKillsFrozenOrphansOfSlotsItDoesNotTake(t *testing.T) {
	t.Parallel()
	env, _, _, old := orphanOfKilledHost(t, "beat", true)
	again := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Host: "c", Lease: clusterLease, StopTimeout: 5 * time.Second,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 0, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	again.start()
	joined := time.Now()
	for deadline := joined.Add(time.Second); !gone(old); {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen orphan %d still lives %s after its host's next instance joined",
				old, time.Since(joined).Round(time.Millisecond))
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
	again.logs.wait(t, 0, waitTimeout, "a worker of this host's previous instance is frozen: killing it", "pid="+strconv.Itoa(old))
}

// orphanOfKilledHost runs host "c" in a process of its own with one worker
// of queue q (mode: the test worker's), SIGKILLs that supervisor and
// returns the worker it left, an orphan of this test process, frozen first
// if frozen.
func orphanOfKilledHost(t *testing.T, mode string, frozen bool) (env *testredis.Env, store *health.Store, id health.ComponentID, old int) {
	t.Helper()
	env = testredis.New(t)
	store = health.NewStore(env.Client, env.Prefix, 0)
	id = health.ComponentID{Queue: "q"}
	// A heartbeat every 10 s: the old worker, once its record is rewritten
	// by a new instance, would exit as stale at its next beat, before it is
	// frozen.
	c := startHostProcess(t, env, "c", 1, clusterLease, "-mode", mode, "-interval", "10s", "-ttl", "30s")
	old = waitFor(t, store, id, isStatus(health.StatusHealthy)).PID
	t.Cleanup(func() { _ = syscall.Kill(old, syscall.SIGKILL) })
	if frozen {
		freeze(t, old)
	}
	// A supervisor running in this process makes it the subreaper the
	// orphan comes to (one on a Redis of its own, with no worker).
	keeper := newHarness(t, supervisor.Config{Host: "keeper",
		Pools: []supervisor.Pool{{Queue: "q", Workers: 0, Command: []string{testWorker, "beat"}}}})
	keeper.start()
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	if gone(old) {
		t.Fatalf("the worker %d died with its supervisor: the test tests nothing", old)
	}
	return env, store, id, old
}

// TestRestartedHostAfterADataLossStopsItsOrphans: fault explorer E48
// (miniredis seed 141160). A host's supervisor was SIGKILLed with a worker
// frozen, and Redis lost its data before the host's next instance joined:
// no record named the orphan, so the next instance neither killed it (E34
// goes by the records) nor waited for it, and started a second process for
// its slot; the frozen orphan outlived its supervisor by 2.3 s (invariant
// 2). The next instance finds its earlier instances' workers on this
// machine by their environment: a frozen one is killed as it joins, a live
// one is waited for before its slot starts again.
func TestRestartedHostAfterADataLossStopsItsOrphans(t *testing.T) {
	t.Parallel()
	for _, frozen := range []bool{true, false} {
		name := "frozen"
		if !frozen {
			name = "running"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Running: it ignores SIGTERM, so its parent-death signal
			// does not end it at once.
			env, store, id, old := orphanOfKilledHost(t, "ignore-term", frozen)
			loseData(t, env.Client, env.Prefix)
			again := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
				Host: "c", Lease: clusterLease, StopTimeout: time.Second,
				Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
				Policy: shortBackoff,
			})
			again.start()
			c := waitFor(t, store, id, func(c health.Component) bool {
				return c.Status == health.StatusHealthy && c.Instance == again.cfg.Instance
			})
			if !gone(old) {
				t.Fatalf("the new instance runs %s (pid %d) while its earlier instance's worker %d still lives", id, c.PID, old)
			}
			if frozen {
				again.logs.wait(t, 0, waitTimeout, "a worker of this host's previous instance is frozen: killing it", "pid="+strconv.Itoa(old))
			} else {
				again.logs.wait(t, 0, waitTimeout, "waiting for the previous supervisor's worker to exit", "pid="+strconv.Itoa(old))
			}
		})
	}
}

// TestAnotherClustersWorkersAreNotThisHosts: two clusters on one machine
// with the same host id and key prefix, on different Redis servers (two
// deployments, or two tests side by side). A host that joins finds its
// earlier instances' workers by their environment (E48); another
// cluster's are not among them: it neither kills the frozen one nor waits
// for the live one (make test failed so: a test's worker was SIGKILLed by
// a supervisor of a test beside it, and that supervisor's slots waited 3 s
// for workers not its own).
func TestAnotherClustersWorkersAreNotThisHosts(t *testing.T) {
	t.Parallel()
	cfg := supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 2, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
		// The other cluster does not judge its frozen worker hung while
		// this test runs.
		Heartbeat: supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: time.Minute},
	}
	other, _ := serverHarness(t, cfg)
	other.start()
	theirs := other.waitHealthy(ids("q", 2)...)
	freeze(t, theirs[0].PID)
	t.Cleanup(func() { _ = syscall.Kill(theirs[0].PID, syscall.SIGCONT) })

	h, _ := serverHarness(t, cfg)
	if h.cfg.Host != other.cfg.Host || h.store.Keys().Prefix != other.store.Keys().Prefix || h.cfg.RedisURL == other.cfg.RedisURL {
		t.Fatalf("host %q prefix %q url %q beside host %q prefix %q url %q: want the same host and prefix on another Redis",
			h.cfg.Host, h.store.Keys().Prefix, h.cfg.RedisURL, other.cfg.Host, other.store.Keys().Prefix, other.cfg.RedisURL)
	}
	h.start()
	mine := h.waitHealthy(ids("q", 2)...)
	for _, part := range []string{"previous instance", "previous supervisor"} {
		if i, ok := h.logs.find(0, part); ok {
			t.Errorf("this host took another cluster's worker for its own: %s", h.logs.line(i))
		}
	}
	for i, c := range mine {
		if c.PID == theirs[i].PID || c.Restarts.LifetimeRestarts != 0 {
			t.Errorf("%s: %s, the other cluster's process %d", c.ID, describe(c), theirs[i].PID)
		}
	}
	if gone(theirs[0].PID) || state(theirs[0].PID) != 'T' {
		t.Errorf("the other cluster's frozen worker %d: gone %v, state %q", theirs[0].PID, gone(theirs[0].PID), state(theirs[0].PID))
	}
	if gone(theirs[1].PID) {
		t.Errorf("the other cluster's worker %d is gone", theirs[1].PID)
	}
}

// TestRestartedHostKillsItsFrozenOrphanDuringAnOutage: explorer seed
// 171702. A host's supervisor was SIGKILLed with a worker frozen, during a
// 17 s Redis outage; every start of its next instance failed reading Redis,
// and the frozen orphan outlived its supervisor by 2.35 s (invariant 2:
// stop_timeout + 1 s). The next instance kills it before it calls Redis,
// even if its start then fails.
func TestRestartedHostKillsItsFrozenOrphanDuringAnOutage(t *testing.T) {
	t.Parallel()
	env, _, _, old := orphanOfKilledHost(t, "beat", true)
	p := testredis.ProxyTo(t, env.URL)
	p.Refuse(true) // Redis unreachable from the new instance
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr, opt.ContextTimeoutEnabled, opt.MaxRetries = p.Addr(), true, -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	// The same host, the same Redis URL in its workers' environment.
	again := newHarnessOn(t, rdb, env.URL, env.Prefix, supervisor.Config{
		Host: "c", Lease: clusterLease, StopTimeout: 5 * time.Second, OpTimeout: 200 * time.Millisecond,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	if err := again.sup.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded with Redis refused")
	}
	again.logs.wait(t, 0, waitTimeout, "a worker of this host's previous instance is frozen: killing it", "pid="+strconv.Itoa(old))
	for deadline := time.Now().Add(waitTimeout); !gone(old); {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen orphan %d still lives", old)
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
}

// TestDuplicateHostLeavesTheLiveInstancesWorkers: review of E54. A second
// vigil started with the id of a host that runs on this machine is
// refused; the first one's workers are not its earlier instance's, and a
// frozen one (an operator's SIGSTOP, a debugger) is left alone.
func TestDuplicateHostLeavesTheLiveInstancesWorkers(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	id := health.ComponentID{Queue: "q"}
	startHostProcess(t, env, "c", 1, clusterLease)
	live := waitFor(t, store, id, isStatus(health.StatusHealthy)).PID
	freeze(t, live)
	t.Cleanup(func() { _ = syscall.Kill(live, syscall.SIGCONT) })
	dup := newHarnessOn(t, env.Client, env.URL, env.Prefix, supervisor.Config{
		Host: "c", Lease: clusterLease,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
	if err := dup.sup.Start(context.Background()); !errors.Is(err, supervisor.ErrHostInUse) {
		t.Fatalf("Start of a second host c: %v, want ErrHostInUse", err)
	}
	if i, ok := dup.logs.find(0, "frozen: killing it"); ok {
		t.Errorf("the refused start killed the live instance's worker: %s", dup.logs.line(i))
	}
	if gone(live) {
		t.Errorf("the live instance's frozen worker %d is gone", live)
	}
}

// TestKillFrozenOrphans: what a start that fails before its supervisor
// joins (vigil serve reads Redis first) calls, for E54: the frozen worker
// of this host's last process goes, another host's is left alone.
func TestKillFrozenOrphans(t *testing.T) {
	t.Parallel()
	env, _, _, old := orphanOfKilledHost(t, "ignore-term", true)
	if n := supervisor.KillFrozenOrphans("other-host", env.URL, env.Prefix, nil); n != 0 {
		t.Fatalf("killed %d frozen workers of another host", n)
	}
	if n := supervisor.KillFrozenOrphans("c", env.URL, env.Prefix, nil); n != 1 {
		t.Fatalf("killed %d frozen workers, want 1", n)
	}
	for deadline := time.Now().Add(waitTimeout); !gone(old); {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen orphan %d still lives", old)
		}
		<-time.After(5 * time.Millisecond) // polling another process's /proc entry
	}
}
