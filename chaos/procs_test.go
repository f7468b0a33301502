package chaos_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

// workerProcs lists the running chaosworker processes of this test (those
// whose environment names its ledger), pid → component. Zombies are dead
// and not listed.
func workerProcs(l *ledger) map[int]string {
	marker := []byte("CHAOS_LEDGER_URL=" + l.srv.URL + "\x00")
	out := map[int]string{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || !running(pid) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !bytes.Contains(append(env, 0), marker) {
			continue
		}
		comp := "?"
		for _, kv := range bytes.Split(env, []byte{0}) {
			if c, ok := bytes.CutPrefix(kv, []byte(health.EnvComponent+"=")); ok {
				comp = string(c)
			}
		}
		out[pid] = comp
	}
	return out
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// sigkill sends SIGKILL to pid if it runs; it reports whether it did.
func sigkill(t *testing.T, pid int) bool {
	t.Helper()
	if !running(pid) {
		return false
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Logf("kill %d: %v", pid, err)
		return false
	}
	return true
}

// reapOrphans kills the test's worker processes that still run and fails
// the test for each: called once every host of the test has stopped.
func reapOrphans(t *testing.T, l *ledger) {
	t.Helper()
	for pid, comp := range workerProcs(l) {
		t.Errorf("orphan: worker process %d (%s) still runs after its host stopped", pid, comp)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
