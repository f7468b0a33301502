package supervisor_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// recoverBeat: a TTL of 500 ms, windows from 100 ms: a 2 s window outlives
// the TTL four times over.
var recoverBeat = supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 500 * time.Millisecond,
	RecoverMin: 100 * time.Millisecond, RecoverMax: 3 * time.Second}

// startRecovering supervises one worker of queue q running the test
// worker's mode (recover, recover-beat) with a window, beating as hb says,
// and returns its id and a reader of its events (opened before it starts).
func startRecovering(t *testing.T, mode string, window time.Duration, hb supervisor.Heartbeat) (health.ComponentID, *eventReader) {
	t.Helper()
	h := newHarness(t, supervisor.Config{
		Pools:     []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, mode, window.String()}}},
		Heartbeat: hb,
		Policy:    longBackoff,
	})
	ev := newEventReader(t, h.store)
	h.start()
	return health.ComponentID{Queue: "q"}, ev
}

// A worker that opens a recovering window longer than its TTL and then
// stops beating is not killed inside the window: the monitor re-arms at
// the key's new expiry. Past the window it is a hang like any other, a
// counted crash (issue 20).
func TestRecoveringWindowOutlivesTTLThenExpiryIsACrash(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	id, ev := startRecovering(t, "recover", window, recoverBeat)
	seq := ev.waitSequence(id, isView(health.StatusRecovering), isView(health.StatusCrashed))
	rec, crashed := seq[0], seq[1]
	if rec.Reason != "loading" || rec.RecoveringUntil == 0 {
		t.Fatalf("recovering event %+v, want reason loading and recovering_until", rec)
	}
	until := time.UnixMilli(rec.LastHeartbeat).Add(window)
	if rec.RecoveringUntil != until.UnixMilli() {
		t.Errorf("recovering_until %d, want the window's end %d", rec.RecoveringUntil, until.UnixMilli())
	}
	at := time.UnixMilli(crashed.UpdatedAt)
	if at.Before(until) {
		t.Errorf("killed at %v, %v before its window's end: the TTL (%v) was judged, not the window",
			at.Format(time.StampMilli), until.Sub(at), recoverBeat.TTL)
	}
	if crashed.ExitCode == nil || *crashed.ExitCode != health.ExitHeartbeatTimeout || crashed.Reason != "heartbeat expired" {
		t.Errorf("crash %+v, want exit_code -2, heartbeat expired", crashed)
	}
	if crashed.RestartCount != 1 || crashed.LifetimeRestarts != 1 {
		t.Errorf("crash not counted: restart_count %d lifetime %d", crashed.RestartCount, crashed.LifetimeRestarts)
	}
}

// A worker that opens a window and then beats on is healthy again at its
// next beat, and stays up past the window's end.
func TestRecoveringEndsAtNextBeat(t *testing.T) {
	t.Parallel()
	const window = time.Second
	// A TTL of 2 s: the worker beats on, and must not be judged hung
	// when the loaded machine starves it for half a second (recoverBeat's
	// TTL). A monitor that judged the window's end rather than the beats
	// still kills it at the window's end.
	hb := recoverBeat
	hb.TTL = 2 * time.Second
	id, ev := startRecovering(t, "recover-beat", window, hb)
	// Both may come in one read of the stream: one reader, in order.
	seq := ev.waitSequence(id, isView(health.StatusRecovering), isView(health.StatusHealthy))
	rec, back := seq[0], seq[1]
	if back.PID != rec.PID || back.Reason != "" || back.RecoveringUntil != 0 {
		t.Errorf("after the window: %+v, want the same process healthy without reason", back)
	}
	// Past the window's end and two TTLs: still the same process.
	ev.expectNone(time.Until(time.UnixMilli(rec.RecoveringUntil).Add(2*hb.TTL)), func(w health.WorkerView) bool {
		return w.Component == id.String() && w.Status != string(health.StatusHealthy)
	})
}

func isView(st health.Status) func(health.WorkerView) bool {
	return func(w health.WorkerView) bool { return w.Status == string(st) }
}

// waitSequence reads id's worker events until one matches each of preds,
// in that order, and returns them; events of one read are all looked at.
func (r *eventReader) waitSequence(id health.ComponentID, preds ...func(health.WorkerView) bool) []health.WorkerView {
	r.tb.Helper()
	var out []health.WorkerView
	deadline := time.Now().Add(waitTimeout)
	for len(out) < len(preds) {
		evs := r.next(deadline)
		if evs == nil {
			r.tb.Fatalf("timed out waiting for event %d of %d of %s (got %+v)", len(out)+1, len(preds), id, out)
		}
		for _, ev := range evs {
			if w := ev.Worker; w != nil && ev.Type == health.EventWorker && w.Component == id.String() && len(out) < len(preds) && preds[len(out)](*w) {
				out = append(out, *w)
			}
		}
	}
	return out
}
