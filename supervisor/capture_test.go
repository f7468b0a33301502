package supervisor_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// A worker's stdout and stderr reach the supervisor's log line by line,
// each with its component and pid, and the last lines are kept for the API
// (GET /api/v1/workers/{component}/logs).
func TestWorkerOutputIsCapturedWithItsComponent(t *testing.T) {
	script := `echo "to stdout as $VIGIL_COMPONENT"; echo "to stderr" >&2; printf 'no newline at the end'; exit 4`
	h := newHarness(t, supervisor.Config{
		Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{"sh", "-c", script}}},
		Policy: policy.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxInWindow: 1},
	})
	h.start()
	id := health.ComponentID{Queue: "q", Slot: 0}
	c := h.waitFor(id, isStatus(health.StatusFailed))
	pid := "pid=" + strconv.Itoa(c.PID)
	for _, line := range []string{`line="to stdout as worker:q:0"`, `line="to stderr"`, `line="no newline at the end"`} {
		h.logs.wait(t, 0, waitTimeout, `msg="worker output"`, "component=worker:q:0", pid, line)
	}
	want := []string{"to stdout as worker:q:0", "to stderr", "no newline at the end"}
	if got := h.sup.Logs(id); !slices.Equal(got, want) {
		t.Fatalf("Logs = %q, want %q", got, want)
	}
	if got := h.sup.Logs(health.ComponentID{Queue: "q", Slot: 9}); len(got) != 0 {
		t.Fatalf("Logs of an unknown component = %q", got)
	}
}
