package health

import (
	"os"
	"syscall"
)

// Exit codes recorded for a component (docs/design.md §4).
const (
	ExitClean            = 0
	ExitUnknown          = -1 // exit status unavailable
	ExitHeartbeatTimeout = -2 // heartbeat expired, or no first heartbeat in time
	ExitBadHeartbeat     = -3 // heartbeat value not a timestamp
	ExitSignalBase       = 128
)

// ExitCodeOf turns a process state into the recorded exit code and, when a
// signal ended the process, the signal's name.
func ExitCodeOf(ps *os.ProcessState) (code int, signal string) {
	if ps == nil {
		return ExitUnknown, ""
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ExitUnknown, ""
	}
	switch {
	case ws.Signaled():
		return ExitSignalBase + int(ws.Signal()), SignalName(ws.Signal())
	case ws.Exited():
		return ws.ExitStatus(), ""
	}
	return ExitUnknown, ""
}

// SignalName returns the conventional name of sig, e.g. "SIGKILL".
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return "signal " + sig.String()
}
