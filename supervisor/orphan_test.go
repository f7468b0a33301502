package supervisor_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestChildrenDieWithSupervisor SIGKILLs a supervisor running in a process
// of its own and checks that none of its children outlives it by more than
// VIGIL_SHUTDOWN_TIMEOUT + 1 s (docs/design.md §4.1, §4.6): the parent-death
// signal reaches each, whichever of the supervisor's threads forked it.
func TestChildrenDieWithSupervisor(t *testing.T) {
	t.Parallel()
	env := testredis.New(t)
	const workers = 3
	stopTimeout := 2 * time.Second
	shutdownTimeout := stopTimeout - time.Second // VIGIL_SHUTDOWN_TIMEOUT

	stderr := newLogSink()
	cmd := exec.Command(testSupervisor, "-redis", env.URL, "-prefix", env.Prefix, "-worker", testWorker,
		"-workers", strconv.Itoa(workers), "-stop-timeout", stopTimeout.String())
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	})
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		wg.Wait()
		if t.Failed() {
			t.Logf("testsupervisor's log:\n%s", stderr.String())
		}
	}()

	line := receive(t, lines, waitTimeout, "the testsupervisor's pids")
	var pids []int
	for _, f := range strings.Fields(strings.TrimPrefix(line, "pids")) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("testsupervisor said %q", line)
		}
		pids = append(pids, pid)
	}
	if len(pids) != workers {
		t.Fatalf("testsupervisor said %q, want %d pids", line, workers)
	}
	store := health.NewStore(env.Client, env.Prefix, 0)
	fds := make([]int, len(pids))
	for i, pid := range pids {
		if c := waitFor(t, store, health.ComponentID{Queue: "q", Slot: i}, isStatus(health.StatusHealthy)); c.PID != pid {
			t.Fatalf("testsupervisor printed pid %d for slot %d, Redis says %d", pid, i, c.PID)
		}
		if fds[i], err = pidfdOpen(pid); err != nil {
			t.Fatalf("pidfd_open(%d): %v", pid, err)
		}
		defer syscall.Close(fds[i])
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	reaped = true
	limit := shutdownTimeout + time.Second
	took, alive := waitExited(t, fds, limit)
	for _, i := range alive {
		t.Errorf("child %d (slot %d) still alive %s after its supervisor was SIGKILLed", pids[i], i, limit)
		_ = syscall.Kill(pids[i], syscall.SIGKILL)
	}
	if len(alive) == 0 {
		t.Logf("children gone %v after the supervisor's SIGKILL (limit %v)", took.Sub(killed), limit)
	}
	for _, pid := range pids {
		if processRuns(pid) {
			t.Errorf("process %d still runs", pid)
		}
	}
}

// pidfd_open(2): the same number on every Linux architecture Go supports.
const sysPidfdOpen = 434

// pidfdOpen returns a descriptor that becomes readable when process pid
// exits, for a process that is not this one's child.
func pidfdOpen(pid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// waitExited waits up to timeout for every process behind fds (pidfds) to
// exit. It returns when the last one did and the indexes of those that
// had not by then.
func waitExited(tb testing.TB, fds []int, timeout time.Duration) (last time.Time, alive []int) {
	tb.Helper()
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		tb.Fatal(err)
	}
	defer syscall.Close(ep)
	left := map[int]bool{}
	for i, fd := range fds {
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}); err != nil {
			tb.Fatal(err)
		}
		left[i] = true
	}
	deadline := time.Now().Add(timeout)
	evs := make([]syscall.EpollEvent, len(fds))
	for len(left) > 0 {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			break
		}
		n, err := syscall.EpollWait(ep, evs, ms)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		for _, ev := range evs[:n] {
			i := int(ev.Fd)
			if left[i] {
				delete(left, i)
				last = time.Now()
				_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fds[i], nil)
			}
		}
	}
	for i := range left {
		alive = append(alive, i)
	}
	return last, alive
}

// processRuns reports whether pid exists and is not a zombie.
func processRuns(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}
