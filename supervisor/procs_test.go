package supervisor_test

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// processAlive reports whether pid is a live process (a zombie, dead but not
// yet reaped, counts as gone).
func processAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return !(i > 0 && i+2 < len(stat) && stat[i+2] == 'Z')
}

// killStrays SIGKILLs, when the test has failed, every worker process left
// under prefix: a process the supervisor lost track of must not hang its
// Stop or outlive the test. Call it after the harness is made (cleanups run
// last first).
func killStrays(t *testing.T, prefix string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for c, pids := range liveWorkers(t, prefix) {
			for _, pid := range pids {
				t.Logf("killing stray worker %d of %s", pid, c)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}
