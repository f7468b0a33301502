package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// clusterLease is short so that a lost host's slots move within seconds.
const clusterLease = 900 * time.Millisecond

// member makes a supervisor of host id on env with a pool q of n workers.
func member(tb testing.TB, env *testredis.Env, host string, n int) *harness {
	tb.Helper()
	return newHarnessOn(tb, env.Client, env.URL, env.Prefix, supervisor.Config{
		Host: host, Lease: clusterLease,
		Pools:  []supervisor.Pool{{Queue: "q", Workers: n, Command: []string{testWorker, "beat"}}},
		Policy: shortBackoff,
	})
}

// placement waits until every slot of q (n of them) is healthy and returns
// slot → host.
func placement(tb testing.TB, store *health.Store, n int) map[int]string {
	tb.Helper()
	out := map[int]string{}
	for _, id := range ids("q", n) {
		c := waitForWithin(tb, store, id, isStatus(health.StatusHealthy), 4*waitTimeout)
		out[id.Slot] = c.Host
	}
	return out
}

func countByHost(p map[int]string) map[string]int {
	out := map[string]int{}
	for _, h := range p {
		out[h]++
	}
	return out
}

// waitSpread waits until each of hosts holds exactly per healthy slots.
func waitSpread(tb testing.TB, store *health.Store, n int, hosts []string, per int) map[int]string {
	tb.Helper()
	return waitSpreadWithin(tb, store, n, hosts, per, waitTimeout)
}

func waitSpreadWithin(tb testing.TB, store *health.Store, n int, hosts []string, per int, timeout time.Duration) map[int]string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := placement(tb, store, n)
		c := countByHost(p)
		ok := true
		for _, h := range hosts {
			ok = ok && c[h] == per
		}
		if ok {
			return p
		}
		if time.Now().After(deadline) {
			tb.Fatalf("slots not spread %d per host over %v: %v", per, hosts, p)
		}
		// Slots move at lease ticks: block on the event stream until
		// something changes.
		r := newEventReader(tb, store)
		r.next(time.Now().Add(clusterLease))
	}
}

// liveWorkers lists the running processes of each component on this
// machine, by the VIGIL_COMPONENT of their environment.
func liveWorkers(tb testing.TB, prefix string) map[string][]int {
	tb.Helper()
	out := map[string][]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // zombie: already dead
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(health.EnvPrefix+"="+prefix+"\x00")) {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if c, ok := bytes.CutPrefix(kv, []byte(health.EnvComponent+"=")); ok {
				out[string(c)] = append(out[string(c)], pid)
			}
		}
	}
	return out
}

// sampleNoDoubles samples the machine's worker processes until stop is
// closed and fails if one component ever runs twice.
func sampleNoDoubles(tb testing.TB, prefix string, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		samples := 0
		for {
			for c, pids := range liveWorkers(tb, prefix) {
				if len(pids) > 1 {
					tb.Errorf("%s runs twice: pids %v", c, pids)
					return
				}
			}
			samples++
			select {
			case <-stop:
				tb.Logf("%d samples of the worker processes, none ran twice", samples)
				return
			case <-time.After(20 * time.Millisecond): // sampling period, not a wait for a goroutine
			}
		}
	})
	return &wg
}

func TestClusterSpreadsSlotsAndMovesThemOnGracefulStop(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	a, b, c := member(t, env, "a", 6), member(t, env, "b", 6), member(t, env, "c", 6)
	a.start()
	b.start()
	c.start()
	waitSpread(t, store, 6, []string{"a", "b", "c"}, 2)

	before := map[int]int{}
	for _, id := range ids("q", 6) {
		before[id.Slot] = a.get(id).Restarts.LifetimeRestarts
	}
	stop := make(chan struct{})
	sampler := sampleNoDoubles(t, env.Prefix, stop)
	if err := c.sup.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := waitSpread(t, store, 6, []string{"a", "b"}, 3)
	close(stop)
	sampler.Wait()
	for _, id := range ids("q", 6) {
		if got := a.get(id).Restarts.LifetimeRestarts; got != before[id.Slot] {
			t.Errorf("%s: lifetime restarts %d → %d: a moved slot counted a crash", id, before[id.Slot], got)
		}
	}
	t.Logf("after c stopped: %v", p)
}

func TestClusterPoolResize(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	a, b := member(t, env, "a", 4), member(t, env, "b", 4)
	a.start()
	b.start()
	waitSpread(t, store, 4, []string{"a", "b"}, 2)
	ctx := context.Background()
	if err := supervisor.SetPoolSize(ctx, store, "q", 6); err != nil {
		t.Fatal(err)
	}
	waitSpread(t, store, 6, []string{"a", "b"}, 3)
	ev := newEventReader(t, store)
	if err := supervisor.SetPoolSize(ctx, store, "q", 2); err != nil {
		t.Fatal(err)
	}
	// Stopped, then removed by their holders (issue 20).
	for id, w := range ev.waitRemoved(ids("q", 6)[2:]...) {
		if w.Status != string(health.StatusStopped) || w.Reason != "pool shrink" || w.Held {
			t.Errorf("%s after shrink: %+v", id, w)
		}
		assertGone(t, store, id)
	}
	waitSpread(t, store, 2, []string{"a", "b"}, 1)
	if err := supervisor.SetPoolSize(ctx, store, "q", -1); err == nil {
		t.Error("negative pool size accepted")
	}
}

func TestClusterDrain(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	a, b := member(t, env, "a", 4), member(t, env, "b", 4)
	a.start()
	b.start()
	waitSpread(t, store, 4, []string{"a", "b"}, 2)
	ctx := context.Background()
	if err := supervisor.SetDrain(ctx, store, "b", true); err != nil {
		t.Fatal(err)
	}
	waitSpread(t, store, 4, []string{"a"}, 4)
	if err := supervisor.SetDrain(ctx, store, "b", false); err != nil {
		t.Fatal(err)
	}
	waitSpread(t, store, 4, []string{"a", "b"}, 2)
}

func TestClusterRefusesDuplicateHostID(t *testing.T) {
	env := testredis.New(t)
	a := member(t, env, "a", 1)
	a.start()
	dup := member(t, env, "a", 1)
	err := dup.sup.Start(context.Background())
	if !errors.Is(err, supervisor.ErrHostInUse) {
		t.Fatalf("second host a: Start = %v, want ErrHostInUse", err)
	}
	if !strings.Contains(err.Error(), `host "a" is alive`) {
		t.Errorf("message does not say why: %v", err)
	}
}

func TestClusterActionFromAnotherHost(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	a, b := member(t, env, "a", 2), member(t, env, "b", 2)
	a.start()
	b.start()
	p := waitSpread(t, store, 2, []string{"a", "b"}, 1)
	// Find the slot a does not hold and stop it through a.
	var id health.ComponentID
	for slot, h := range p {
		if h == "b" {
			id = health.ComponentID{Queue: "q", Slot: slot}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rec, err := a.sup.StopComponent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != health.StatusStopped || !rec.Held || rec.Host != "b" {
		t.Fatalf("stop through a of b's %s: %s", id, describe(rec))
	}
	if _, err := a.sup.Reset(ctx, health.ComponentID{Queue: "q", Slot: 9}, false); !errors.Is(err, supervisor.ErrUnknownComponent) {
		t.Fatalf("reset of an unknown slot: %v", err)
	}
	rec, err = a.sup.Restart(ctx, id)
	if err != nil || rec.Status == health.StatusStopped {
		t.Fatalf("restart through a: %v %s", err, describe(rec))
	}
}

func TestClusterLeaderFailover(t *testing.T) {
	env := testredis.New(t)
	a, b := member(t, env, "a", 1), member(t, env, "b", 1)
	a.start()
	b.start()
	ctx := context.Background()
	leader := func() string {
		v, _ := env.Client.Get(ctx, env.Prefix+"leader").Result()
		return health.LeaseHost(v)
	}
	first := leader()
	if first != "a" && first != "b" {
		t.Fatalf("no leader: %q", first)
	}
	old, other := a, "b"
	if first == "b" {
		old, other = b, "a"
	}
	if err := old.sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for leader() != other {
		if time.Now().After(deadline) {
			t.Fatalf("leadership did not move to %s (leader %q)", other, leader())
		}
		newEventReader(t, a.store).next(time.Now().Add(clusterLease))
	}
}

// TestClusterHostSIGKILL: a host process is SIGKILLed; its slots run on
// the other hosts once its leases expire, no slot ever runs twice, no crash
// is counted; started again with the same id it rejoins at once.
func TestClusterHostSIGKILL(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	a, b := member(t, env, "a", 6), member(t, env, "b", 6)
	a.start()
	b.start()
	stop := make(chan struct{})
	sampler := sampleNoDoubles(t, env.Prefix, stop)
	defer func() { close(stop); sampler.Wait() }()

	startC := func() *exec.Cmd { return startHostProcess(t, env, "c", 6, clusterLease) }
	c := startC()
	waitSpread(t, store, 6, []string{"a", "b", "c"}, 2)
	killed := time.Now()
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	p := waitSpread(t, store, 6, []string{"a", "b"}, 3)
	t.Logf("host c SIGKILLed: its slots healthy elsewhere after %s: %v", time.Since(killed).Round(time.Millisecond), p)
	for _, id := range ids("q", 6) {
		if n := a.get(id).Restarts.LifetimeRestarts; n != 0 {
			t.Errorf("%s: %d restarts counted for a host loss", id, n)
		}
	}
	rejoin := time.Now()
	startC()
	waitSpread(t, store, 6, []string{"a", "b", "c"}, 2)
	t.Logf("host c restarted with the same id: back in the spread after %s", time.Since(rejoin).Round(time.Millisecond))
}

// TestHostRestartedAfterSIGKILLComesBackAtOnce: a host SIGKILLed and started
// again with the same id on this machine does not wait for its old record
// or leases to expire (docs/design.md §11, first rule): its slots run again as
// soon as the old workers are gone, restarts not counted.
func TestHostRestartedAfterSIGKILLComesBackAtOnce(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	const lease = time.Minute // far longer than the test may take
	start := func() *exec.Cmd { return startHostProcess(t, env, "x", 2, lease) }
	first := start()
	before := map[health.ComponentID]int{}
	for _, id := range ids("q", 2) {
		before[id] = waitFor(t, store, id, isStatus(health.StatusHealthy)).PID
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	again := time.Now()
	start()
	for _, id := range ids("q", 2) {
		c := waitForWithin(t, store, id, func(c health.Component) bool {
			return c.Status == health.StatusHealthy && c.PID != before[id]
		}, lease/2)
		if c.Restarts.LifetimeRestarts != 0 {
			t.Errorf("%s: %d restarts counted for the host's own restart", id, c.Restarts.LifetimeRestarts)
		}
	}
	t.Logf("host x back with its slots %s after its restart (lease %s)", time.Since(again).Round(time.Millisecond), lease)
}

// startHostProcess runs a supervisor of host with n workers of q in a
// process of its own (testsupervisor -cluster) and returns once it runs;
// the test's cleanup kills it and shows its log if the test failed.
func startHostProcess(t *testing.T, env *testredis.Env, host string, n int, lease time.Duration, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testSupervisor, append([]string{"-redis", env.URL, "-prefix", env.Prefix, "-worker", testWorker,
		"-workers", strconv.Itoa(n), "-host", host, "-lease", lease.String(), "-cluster"}, args...)...)
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("host %s's log:\n%s", host, stderr.String())
		}
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "started" {
		t.Fatalf("host %s did not start: %q\n%s", host, line, stderr.String())
	}
	return cmd
}
