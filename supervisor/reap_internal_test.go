package supervisor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// TestHurryKillsAtOnce: a cleanup whose deadline is far away ends as soon
// as hurry is called for its supervisor instance: what was left is
// SIGKILLed (a TERM-ignoring process here).
func TestHurryKillsAtOnce(t *testing.T) {
	reap.acquire()
	defer reap.release()
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 1000 & echo started; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "VIGIL_SPAWN_ID=hurrytest.1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	reap.mu.Lock()
	err = cmd.Start()
	if err == nil {
		reap.started(cmd.Process.Pid, "hurrytest.1", clock.Real{})
	}
	reap.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	// The leader alone exits: its child, ignoring SIGTERM, stays.
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	rec := reap.exited(cmd.Process.Pid)
	reap.clean(rec, time.Now(), time.Hour, 0)
	select {
	case <-rec.done:
		t.Fatal("cleanup ended while the TERM-ignoring child lives")
	case <-time.After(100 * time.Millisecond):
	}
	(&Supervisor{cfg: Config{Instance: "hurrytest"}}).killDescendants()
	select {
	case <-rec.done:
		if rec.left != 0 {
			t.Errorf("%d processes left", rec.left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cleanup still running 5s after hurry")
	}
}
