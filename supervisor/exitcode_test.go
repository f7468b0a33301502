package supervisor_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestExitCodesRecorded runs a real worker per way of dying and checks what
// the crash record says (docs/design.md §4.3). The backoff is an hour, so the
// crashed record stays for the test to read.
func TestExitCodesRecorded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		args         []string
		startTimeout time.Duration
		sigkill      bool // the test SIGKILLs the healthy worker
		wantCode     int
		wantSignal   string
		wantReason   string
	}{
		{name: "exit 3", args: []string{"exit", "3"}, wantCode: 3, wantReason: "exited with code 3"},
		{name: "exit 0 unasked", args: []string{"exit", "0"}, wantCode: 0, wantReason: "exited with code 0"},
		{name: "beat-exit 5", args: []string{"beat-exit", "5"}, wantCode: 5, wantReason: "exited with code 5"},
		{name: "SIGKILL", args: []string{"beat"}, sigkill: true, wantCode: 137, wantSignal: "SIGKILL", wantReason: "killed by SIGKILL"},
		{name: "hang", args: []string{"hang"}, wantCode: health.ExitHeartbeatTimeout, wantReason: "heartbeat expired"},
		{name: "bad heartbeat", args: []string{"badbeat"}, wantCode: health.ExitBadHeartbeat, wantReason: `invalid heartbeat "not-a-time"`},
		{name: "no first heartbeat", args: []string{"nobeat"}, startTimeout: 300 * time.Millisecond,
			wantCode: health.ExitHeartbeatTimeout, wantReason: "no heartbeat within start_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hb := fastBeat
			hb.StartTimeout = tt.startTimeout
			h := newHarness(t, supervisor.Config{
				Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: append([]string{testWorker}, tt.args...)}},
				Heartbeat: hb,
				Policy:    longBackoff,
			})
			id := health.ComponentID{Queue: "q"}
			h.start()
			var pid int
			if tt.sigkill {
				pid = h.waitFor(id, isStatus(health.StatusHealthy)).PID
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			c := h.waitFor(id, isStatus(health.StatusCrashed))
			if !c.HasExit || c.ExitCode != tt.wantCode || c.Signal != tt.wantSignal || c.Reason != tt.wantReason {
				t.Errorf("crash record: exit_code %d (has %v), signal %q, reason %q; want %d, %q, %q",
					c.ExitCode, c.HasExit, c.Signal, c.Reason, tt.wantCode, tt.wantSignal, tt.wantReason)
			}
			if pid != 0 && c.PID != pid {
				t.Errorf("crash record pid %d, want the killed %d", c.PID, pid)
			}
			if c.Restarts.RestartCount != 1 || c.Restarts.LifetimeRestarts != 1 || len(c.Restarts.Crashes) != 1 {
				t.Errorf("restart history %+v, want one counted crash", c.Restarts)
			}
			if c.Held {
				t.Error("crashed record is held")
			}
		})
	}
}
