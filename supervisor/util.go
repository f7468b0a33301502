package supervisor

import (
	"strconv"
	"syscall"
)

const (
	sigKill = syscall.SIGKILL
	sigTerm = syscall.SIGTERM
)

func itoa(n int) string { return strconv.Itoa(n) }
