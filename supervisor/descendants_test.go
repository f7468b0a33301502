package supervisor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// forkingScript starts, in the directory $1, three descendants that write
// their pids there: a child that ignores SIGTERM, a plain child, and a
// grandchild that left the worker's session and group (setsid) and ignores
// SIGTERM too; all keep the output pipe open. Then it runs last.
func forkingScript(last string) string {
	return `d=$1
sh -c 'trap "" TERM; echo $$ > "$1/ignorer.tmp"; mv "$1/ignorer.tmp" "$1/ignorer"; while :; do sleep 1; done' ignorer "$d" &
sleep 1000 & echo $! > "$d/sleeper.tmp"; mv "$d/sleeper.tmp" "$d/sleeper"
setsid sh -c 'trap "" TERM; echo $$ > "$1/escaped.tmp"; mv "$1/escaped.tmp" "$1/escaped"; while :; do sleep 1; done' escaped "$d" &
while [ ! -e "$d/ignorer" ] || [ ! -e "$d/escaped" ]; do sleep 0.01; done
echo descendants started
` + last
}

// descendantPIDs reads the pids forkingScript wrote to dir.
func descendantPIDs(t *testing.T, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range []string{"ignorer", "sleeper", "escaped"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("descendant %s: %v", name, err)
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil {
			t.Fatalf("descendant %s: %q", name, b)
		}
		out[name] = pid
	}
	return out
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// zombieOfOurs reports whether pid is a zombie child of this process
// (nobody reaped it).
func zombieOfOurs(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+2:])
	return len(f) > 1 && f[0][0] == 'Z' && string(f[1]) == strconv.Itoa(os.Getpid())
}

// waitGone waits until none of pids runs and none is left a zombie of this
// process, up to timeout; then it kills the survivors (so that the test can
// end) and fails.
func waitGone(t *testing.T, pids map[string]int, timeout time.Duration, when string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for name, pid := range pids {
			if alive(pid) || zombieOfOurs(pid) {
				left = append(left, name+"="+strconv.Itoa(pid))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("%s: descendants still there %s later: %v", when, timeout, left)
		}
		time.Sleep(20 * time.Millisecond) // polling other processes' state: no signal tells
	}
}

const descStopTimeout = 2 * time.Second

func descendantHarness(t *testing.T, last string) (*harness, string) {
	dir := t.TempDir()
	h := newHarness(t, supervisor.Config{
		Pools:       []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{"sh", "-c", forkingScript(last), testWorker, dir}}},
		Policy:      longBackoff,
		StopTimeout: descStopTimeout,
	})
	return h, dir
}

// TestDescendantsDieWithACrashedWorker: a worker leader that exits leaves
// behind a TERM-ignoring child, a plain child and a setsid grandchild; none
// survives the crash by more than stop_timeout (+1 s), and none is left a
// zombie (issue 18, row 4).
func TestDescendantsDieWithACrashedWorker(t *testing.T) {
	t.Parallel()
	h, dir := descendantHarness(t, `exit 3`)
	h.start()
	id := health.ComponentID{Queue: "q"}
	c := h.waitFor(id, isStatus(health.StatusCrashed))
	pids := descendantPIDs(t, dir)
	if c.ExitCode != 3 {
		t.Errorf("crashed record %s, want exit code 3", describe(c))
	}
	waitGone(t, pids, descStopTimeout+time.Second, "after a crash")
}

// TestDescendantsDieWithAStoppedWorker: an operator stop ends the worker and
// everything it started, within stop_timeout, before the stop is recorded.
func TestDescendantsDieWithAStoppedWorker(t *testing.T) {
	t.Parallel()
	h, dir := descendantHarness(t, `exec "$0" beat`)
	h.start()
	id := health.ComponentID{Queue: "q"}
	h.waitFor(id, isStatus(health.StatusHealthy))
	pids := descendantPIDs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := h.sup.StopComponent(ctx, id); err != nil {
		t.Fatalf("StopComponent: %v", err)
	}
	h.waitFor(id, isStatus(health.StatusStopped))
	waitGone(t, pids, time.Second, "after the stop was recorded")
}

// TestDescendantsDieWithTheSupervisor: Stop returns within stop_timeout +
// 1 s although descendants ignore SIGTERM and hold the output pipe, and
// none of them is left.
func TestDescendantsDieWithTheSupervisor(t *testing.T) {
	t.Parallel()
	h, dir := descendantHarness(t, `exec "$0" beat`)
	h.start()
	id := health.ComponentID{Queue: "q"}
	h.waitFor(id, isStatus(health.StatusHealthy))
	pids := descendantPIDs(t, dir)
	stopped := make(chan time.Duration, 1)
	begin := time.Now()
	go func() {
		_ = h.sup.Stop(context.Background())
		stopped <- time.Since(begin)
	}()
	limit := descStopTimeout + time.Second
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case took := <-stopped:
		t.Logf("Stop took %s (stop_timeout %s)", took, descStopTimeout)
		waitGone(t, pids, 100*time.Millisecond, "after Stop returned")
	case <-timer.C:
		t.Errorf("Stop still running after stop_timeout + 1s")
		waitGone(t, pids, 0, "Stop still running after stop_timeout + 1s")
	}
}

// TestStopContextKillsDescendants: when Stop's context ends before
// stop_timeout, what workers left behind is SIGKILLed too, not only the
// groups of workers still alive.
func TestStopContextKillsDescendants(t *testing.T) {
	t.Parallel()
	h, dir := descendantHarness(t, `exec "$0" beat`)
	h.start()
	id := health.ComponentID{Queue: "q"}
	h.waitFor(id, isStatus(health.StatusHealthy))
	pids := descendantPIDs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_ = h.sup.Stop(ctx)
	took := time.Since(begin)
	t.Logf("Stop with a 300ms context took %s (stop_timeout %s)", took, descStopTimeout)
	waitGone(t, pids, 500*time.Millisecond, "after Stop's context ended")
	if took > descStopTimeout {
		t.Errorf("Stop took %s, past stop_timeout: its context was not honoured", took)
	}
}
