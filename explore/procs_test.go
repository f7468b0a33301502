package explore

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process's start time read from /proc is close to when it started, and
// its worker environment is read.
func TestProcStarted(t *testing.T) {
	began := time.Now()
	cmd := exec.Command("sleep", "5")
	cmd.Env = append(os.Environ(), "VIGIL_COMPONENT=worker:a:1", "VIGIL_HOST=h7", "VIGIL_PREFIX=px:")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// os/exec's Start returns once the exec has begun, which can be
	// before the kernel set up the new environment: read until it is
	// there.
	table := newProcTable()
	p, ok := table.read(cmd.Process.Pid)
	for deadline := time.Now().Add(2 * time.Second); !ok && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling /proc, not waiting for a goroutine
		p, ok = table.read(cmd.Process.Pid)
	}
	if !ok || p.comp != "worker:a:1" || p.host != "h7" || p.prefix != "px:" || !p.alive() {
		t.Fatalf("read %+v %v", p, ok)
	}
	// btime is whole seconds: the start time may be up to a second early.
	if d := p.started().Sub(began); d < -1100*time.Millisecond || d > time.Second {
		t.Fatalf("started %s from the moment it was started", d)
	}
	found := false
	for _, c := range children(os.Getpid()) {
		found = found || c == cmd.Process.Pid
	}
	if !found {
		t.Fatal("the child is not among this process's children")
	}
}

// procWhere names every thread of a process (E43's evidence: a zombie
// leader waits for its other threads), and a stopped one with its kernel
// stack; a gone process is said gone.
func TestProcWhereNamesThreads(t *testing.T) {
	got := procWhere(os.Getpid()) // a Go test binary: several threads
	if !strings.Contains(got, "[threads: ") {
		t.Fatalf("procWhere of this process: %q", got)
	}
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid)
	where := taskWhere(dir, "x")
	for deadline := time.Now().Add(2 * time.Second); !strings.HasPrefix(where, "x T") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling /proc for the stop to take hold
		where = taskWhere(dir, "x")
	}
	if !strings.HasPrefix(where, "x T") || !strings.Contains(where, "{") {
		t.Fatalf("a stopped task: %q", where)
	}
	if got := procWhere(1 << 30); got != fmt.Sprint(1<<30)+" gone" {
		t.Fatalf("a gone process: %q", got)
	}
	_ = blockedTasks(3) // reads the whole machine without failing
}
