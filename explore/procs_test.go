package explore

import (
	"os"
	"os/exec"
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
