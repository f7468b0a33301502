package health_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// pttl returns the heartbeat key's remaining life.
func pttl(tb testing.TB, s *health.Store) time.Duration {
	tb.Helper()
	d, err := s.Client().PTTL(testCtx(tb), s.Keys().Heartbeat(tag0)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// about reports whether got is want, less at most the time a test takes.
func about(got, want time.Duration) bool { return got <= want && got > want-5*time.Second }

// A heartbeat with recover_for opens a window: the key lives that long,
// the record says recovering with the reason and the window's end; the
// next ordinary beat ends it (issue 20).
func TestRecoverWindowThenBeatIsHealthy(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusHealthy, beatPID))
	h, fc := newHeartbeater(t, s)
	ctx := testCtx(t)

	got, err := h.Recover(ctx, 90*time.Second, "loading model")
	if err != nil {
		t.Fatal(err)
	}
	if got != 90*time.Second {
		t.Errorf("window granted %v, want 90s", got)
	}
	if d := pttl(t, s); !about(d, 90*time.Second) {
		t.Errorf("heartbeat key lives %v, want about 90s (the TTL is %v)", d, beatTTL)
	}
	c, err := s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != health.StatusRecovering || c.Reason != "loading model" || !c.RecoveringUntil.Equal(fc.Now().Add(90*time.Second)) {
		t.Errorf("record: status %s reason %q until %v; want recovering, loading model, %v", c.Status, c.Reason, c.RecoveringUntil, fc.Now().Add(90*time.Second))
	}
	if v := c.View(); v.RecoveringUntil != fc.Now().Add(90*time.Second).UnixMilli() {
		t.Errorf("view recovering_until %d", v.RecoveringUntil)
	}

	fc.Advance(time.Second)
	res, err := h.Beat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != health.BeatHealthy {
		t.Errorf("ordinary beat after the window opened = %v, want BeatHealthy", res)
	}
	assertHeartbeatKey(t, s, fc.Now())
	rec := hash(t, s, s.Keys().Component(tag0))
	if rec[health.FieldStatus] != "healthy" || rec[health.FieldReason] != "" {
		t.Errorf("after the beat: %v, want healthy without a reason", rec)
	}
	if _, ok := rec[health.FieldRecoveringUntil]; ok {
		t.Errorf("recovering_until left behind: %v", rec)
	}
}

// The window is clamped to the heartbeater's bounds (5–120 s by default),
// and is never shorter than the TTL.
func TestRecoverWindowClamped(t *testing.T) {
	tests := []struct {
		name     string
		min, max time.Duration
		ask      time.Duration
		want     time.Duration
	}{
		{"above the default max", 0, 0, 10 * time.Minute, health.RecoverMaxDefault},
		{"below the default min: the TTL wins", 0, 0, time.Second, beatTTL},
		{"inside", 0, 0, 45 * time.Second, 45 * time.Second},
		{"configured max", 0, 50 * time.Second, 2 * time.Minute, 50 * time.Second},
		{"configured min above the TTL", 40 * time.Second, 0, 2 * time.Second, 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			seed(t, s, record(tag0, health.StatusHealthy, beatPID))
			h, _ := newHeartbeater(t, s)
			h.RecoverMin, h.RecoverMax = tt.min, tt.max
			got, err := h.Recover(testCtx(t), tt.ask, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("window %v, want %v", got, tt.want)
			}
			if d := pttl(t, s); !about(d, tt.want) {
				t.Errorf("key lives %v, want about %v", d, tt.want)
			}
		})
	}
}

// The script clamps whatever a worker of another language passes: without
// bounds it uses 5 s and 120 s.
func TestRecoverScriptDefaultBounds(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusHealthy, beatPID))
	h, _ := newHeartbeater(t, s)
	h.TTL = time.Second
	got, err := h.Recover(testCtx(t), time.Millisecond, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got != health.RecoverMinDefault {
		t.Errorf("window %v, want the min %v", got, health.RecoverMinDefault)
	}
}

// A stopping worker asks in vain: an ordinary beat, no window.
func TestRecoverWhileStoppingIsABeat(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStopping, beatPID))
	h, _ := newHeartbeater(t, s)
	got, err := h.Recover(testCtx(t), time.Minute, "x")
	if err != nil || got != 0 {
		t.Fatalf("Recover = %v, %v; want 0, nil", got, err)
	}
	if st := hash(t, s, s.Keys().Component(tag0))[health.FieldStatus]; st != "stopping" {
		t.Errorf("status %s, want stopping", st)
	}
	if d := pttl(t, s); d > beatTTL {
		t.Errorf("key lives %v, more than the TTL", d)
	}
}

// A starting worker may open a window at once: it has beaten, so it has a
// healthy_since, and the window ends in healthy.
func TestRecoverFromStarting(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStarting, beatPID))
	h, fc := newHeartbeater(t, s)
	if _, err := h.Recover(testCtx(t), time.Minute, "warm-up"); err != nil {
		t.Fatal(err)
	}
	rec := hash(t, s, s.Keys().Component(tag0))
	if rec[health.FieldStatus] != "recovering" || rec[health.FieldHealthySince] != health.FormatHeartbeat(fc.Now()) {
		t.Errorf("record %v, want recovering with healthy_since now", rec)
	}
}

// While a window is on, Run sends no ordinary beat (one would end it)
// until one interval before its end; EndRecovery lets the next one go.
func TestRunHoldsBeatsDuringWindow(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusHealthy, beatPID))
	h, fc := newHeartbeater(t, s)
	ctx := testCtx(t)
	if _, err := h.Recover(ctx, time.Minute, "x"); err != nil {
		t.Fatal(err)
	}
	beats := h.Beats()
	if err := h.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Beats() != beats {
		t.Fatalf("Run beat during the window")
	}
	fc.Advance(time.Minute - h.Interval)
	if err := h.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Beats() != beats+1 || hash(t, s, s.Keys().Component(tag0))[health.FieldStatus] != "healthy" {
		t.Fatalf("Run did not beat one interval before the window's end")
	}
	if _, err := h.Recover(ctx, time.Minute, "x"); err != nil {
		t.Fatal(err)
	}
	h.EndRecovery()
	if err := h.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Beats() != beats+2 {
		t.Fatalf("Run did not beat after EndRecovery")
	}
}
