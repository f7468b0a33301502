package health_test

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

func TestExitCodeOf(t *testing.T) {
	tests := []struct {
		name       string
		cmd        []string
		signal     syscall.Signal // sent once started; 0 = let it exit
		wantCode   int
		wantSignal string
	}{
		{"clean", []string{"sh", "-c", "exit 0"}, 0, 0, ""},
		{"exit 3", []string{"sh", "-c", "exit 3"}, 0, 3, ""},
		{"exit 255", []string{"sh", "-c", "exit 255"}, 0, 255, ""},
		{"SIGKILL", []string{"sleep", "10"}, syscall.SIGKILL, 137, "SIGKILL"},
		{"SIGTERM", []string{"sleep", "10"}, syscall.SIGTERM, 143, "SIGTERM"},
		{"SIGINT", []string{"sleep", "10"}, syscall.SIGINT, 130, "SIGINT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tt.cmd[0], tt.cmd[1:]...)
			if err := cmd.Start(); err != nil {
				t.Fatalf("start %v: %v", tt.cmd, err)
			}
			if tt.signal != 0 {
				if err := cmd.Process.Signal(tt.signal); err != nil {
					t.Fatalf("signal: %v", err)
				}
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if tt.wantCode != 0 && !errors.As(err, &ee) {
				t.Fatalf("Wait = %v, want an *exec.ExitError", err)
			}
			code, sig := health.ExitCodeOf(cmd.ProcessState)
			if code != tt.wantCode || sig != tt.wantSignal {
				t.Errorf("ExitCodeOf = %d, %q; want %d, %q", code, sig, tt.wantCode, tt.wantSignal)
			}
		})
	}
}

func TestExitCodeOfNil(t *testing.T) {
	if code, sig := health.ExitCodeOf(nil); code != -1 || sig != "" {
		t.Errorf("ExitCodeOf(nil) = %d, %q; want -1, \"\"", code, sig)
	}
}

func TestExitCodeConstants(t *testing.T) {
	// docs/design.md §4: 0 clean, -1 unknown, -2 heartbeat timeout, -3 invalid heartbeat.
	for _, tt := range []struct{ got, want int }{
		{health.ExitClean, 0}, {health.ExitUnknown, -1}, {health.ExitHeartbeatTimeout, -2}, {health.ExitBadHeartbeat, -3},
	} {
		if tt.got != tt.want {
			t.Errorf("constant = %d, want %d", tt.got, tt.want)
		}
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT",
	} {
		if got := health.SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", sig, got, want)
		}
	}
	if got := health.SignalName(syscall.SIGWINCH); got == "" {
		t.Error("SignalName of an unlisted signal is empty")
	}
}
