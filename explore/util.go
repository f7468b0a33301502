package explore

import (
	"syscall"
	"time"
)

func secondsSince(t time.Time) float64 { return time.Since(t).Seconds() }

// killPid sends SIGKILL to pid (with group, to its process group).
func killPid(pid int, group bool) error {
	if group {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return syscall.Kill(pid, syscall.SIGKILL)
}
