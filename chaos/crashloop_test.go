package chaos_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

// TestCrashLoop is scenario 3: a pool whose command exits at once. The
// worker is restarted after 1, 2, 4, 8 × backoff_base and turns failed at
// its 5th crash in the window (max_in_window 5, lifetime_restarts 4), and
// nothing starts it again; once the command is fixed, a reset through the
// API brings it back with its counters cleared. vigil runs in a process of
// its own, so the clock is real: backoff_base is 100 ms in the short
// variant, the default 1 s in the long one.
func TestCrashLoop(t *testing.T) {
	need(t, modeShort)
	base := pick(100*time.Millisecond, time.Second)
	const q = "loop"
	id := health.ComponentID{Queue: q, Slot: 0}
	r := newRig(t, q)
	loopFile := filepath.Join(t.TempDir(), "crash-loop")
	if err := os.WriteFile(loopFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := r.spec("h1", poolSpec{Queue: q, Workers: 1, Env: map[string]string{"CHAOS_CRASHLOOP_FILE": loopFile}})
	spec.Policy = policySpec{BackoffBase: base, BackoffMax: 60 * time.Second, Window: 5 * time.Minute, MaxInWindow: 5, MaxLifetime: 20}
	h := startHost(t, spec)

	var rec health.Component
	if !r.events.wait(30*base+30*time.Second, time.Second, func() bool {
		rec = r.records([]health.ComponentID{id})[0]
		return rec.Status == health.StatusFailed
	}) {
		t.Fatalf("%s not failed: %s", id, describe([]health.Component{rec}))
	}
	failedAt := time.Now()
	// Nothing may start it again: wait past the next delay the policy
	// would have chosen (16 × base; wall time is the input here).
	<-time.After(time.Until(failedAt.Add(20 * base)))

	type ev struct {
		status string
		at     int64
		pid    int
	}
	var seq []ev
	for _, e := range r.events.all() {
		if w := e.ev.Worker; w != nil && w.Component == id.String() {
			seq = append(seq, ev{w.Status, e.ev.Timestamp, w.PID})
		}
	}
	var starts, crashes []ev
	for _, e := range seq {
		switch e.status {
		case string(health.StatusStarting):
			starts = append(starts, e)
		case string(health.StatusCrashed):
			crashes = append(crashes, e)
		}
	}
	if len(crashes) != 5 || len(starts) != 5 {
		t.Fatalf("%d starts and %d crashes, want 5 and 5: %+v", len(starts), len(crashes), seq)
	}
	// Each restart comes base × 2^n after the crash before it (event
	// times are in ms; the slack is for a loaded machine under -race).
	slack := 250 * time.Millisecond
	var delays []time.Duration
	for i := range 4 {
		got := time.Duration(starts[i+1].at-crashes[i].at) * time.Millisecond
		want := base << i
		delays = append(delays, got)
		if got < want-time.Millisecond || got > want+slack {
			t.Errorf("restart %d came %s after its crash, want %s (+%s)", i+1, got, want, slack)
		}
	}
	rec = r.records([]health.ComponentID{id})[0]
	if rec.Restarts.LifetimeRestarts != 4 || !strings.HasPrefix(rec.Restarts.FailureReason, policy.ReasonRapid) || len(rec.Restarts.Crashes) != 5 {
		t.Errorf("failed record: lifetime %d, reason %q, %d crashes in the window; want 4, %q, 5",
			rec.Restarts.LifetimeRestarts, rec.Restarts.FailureReason, len(rec.Restarts.Crashes), policy.ReasonRapid)
	}

	// Fix the command, reset with restart through the API.
	if err := os.Remove(loopFile); err != nil {
		t.Fatal(err)
	}
	h.must(http.MethodPost, "/api/v1/workers/"+id.String()+"/reset?restart=true", nil, http.StatusOK, nil)
	back := r.waitHealthy([]health.ComponentID{id}, 30*time.Second)[0]
	if back.Restarts.LifetimeRestarts != 0 || back.Restarts.RestartCount != 0 || len(back.Restarts.Crashes) != 0 || back.Held {
		t.Errorf("after reset: %+v", back.Restarts)
	}
	result(t, "crashes=%d (failed at the 5th, lifetime_restarts=4) delays=%v (base %s) restarts_after_failed=0 reset→healthy", len(crashes), delays, base)
}
