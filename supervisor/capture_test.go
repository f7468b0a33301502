package supervisor_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/metrics"
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

// TestLongOutputLineDoesNotKillTheWorker: a worker printing a line longer
// than any buffer (70,000 bytes, then binary bytes) keeps running: the line
// is logged truncated with a marker, the binary escaped, and the worker's
// next writes succeed (issue 18, row 3: the pipe was closed and the worker
// died of SIGPIPE, a false crash).
func TestLongOutputLineDoesNotKillTheWorker(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	script := `head -c 70000 /dev/zero | tr '\0' a; echo; printf 'bin \000\377\033[31mred\n'; echo after; exec "$0" beat`
	h := newHarness(t, supervisor.Config{
		Pools:   []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{"sh", "-c", script, testWorker}}},
		Policy:  longBackoff,
		Metrics: m,
	})
	h.start()
	id := health.ComponentID{Queue: "q"}
	r := newEventReader(t, h.store)
	h.waitFor(id, isStatus(health.StatusHealthy))
	h.logs.wait(t, 0, waitTimeout, `msg="worker output"`, `line=after`)
	logs := h.sup.Logs(id)
	var long, bin bool
	for _, l := range logs {
		if strings.HasPrefix(l, "aaaa") {
			long = true
			if len(l) > supervisor.MaxLogLineDefault+100 || !strings.Contains(l, "[truncated 53616 bytes]") {
				t.Errorf("long line kept as %d bytes ending %q", len(l), l[max(0, len(l)-60):])
			}
		}
		if strings.HasPrefix(l, "bin ") {
			bin = true
			if want := `bin \x00\xff\x1b[31mred`; l != want {
				t.Errorf("binary line kept as %q, want %q", l, want)
			}
		}
	}
	if !long || !bin {
		t.Errorf("Logs = %.300q: want the truncated line and the binary one", logs)
	}
	r.expectNone(300*time.Millisecond, func(w health.WorkerView) bool { return w.Status == string(health.StatusCrashed) })
	if got := counterValue(t, m, "vigil_worker_output_truncated_total", "q"); got != 1 {
		t.Errorf("vigil_worker_output_truncated_total{queue=q} = %v, want 1", got)
	}
}

// TestLogTailIsBoundedInBytes: 200 lines of 65,000 bytes leave at most
// LogTail bytes in a worker's tail (issue 18, row 11: 12.9 MB per worker).
func TestLogTailIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	// 13 MB in 200 lines of 65,000 bytes from three processes (a shell
	// loop of 400 processes outlasted the minute's start timeout on a
	// loaded CI machine).
	script := `head -c 13000000 /dev/zero | tr '\0' b | fold -w 65000; echo; echo done; exec "$0" beat`
	beat := fastBeat
	beat.StartTimeout = 5 * time.Minute
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{"sh", "-c", script, testWorker}}},
		Policy:    longBackoff,
		Heartbeat: beat,
		LogTail:   64 << 10,
	})
	h.start()
	id := health.ComponentID{Queue: "q"}
	// The 13 MB pass through the capture (under -race) before the first
	// beat, so the wait is the start timeout's, not waitTimeout.
	waitForWithin(t, h.store, id, isStatus(health.StatusHealthy), beat.StartTimeout)
	h.logs.wait(t, 0, waitTimeout, `msg="worker output"`, `line=done`)
	total := 0
	logs := h.sup.Logs(id)
	for _, l := range logs {
		total += len(l)
	}
	if total > 64<<10 || !slices.Contains(logs, "done") {
		t.Errorf("tail holds %d lines, %d bytes (cap %d), last %.40q", len(logs), total, 64<<10, logs[len(logs)-1])
	}
}

// counterValue reads the counter name{queue=queue} from m's registry.
func counterValue(tb testing.TB, m *metrics.Metrics, name, queue string) float64 {
	tb.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
