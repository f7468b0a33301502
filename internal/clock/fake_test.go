package clock_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

var start = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

var _ clock.Clock = (*clock.Fake)(nil)

// firing records which timers ran and what the clock said when they did.
type firing struct {
	mu  sync.Mutex
	got []fired
}

type fired struct {
	name string
	at   time.Duration // Now() - start inside the callback
}

func (r *firing) timer(c *clock.Fake, name string) func() {
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, fired{name, c.Now().Sub(start)})
	}
}

func (r *firing) take() []fired {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// timerSpec is a timer to schedule at the start of a test.
type timerSpec struct {
	name string
	d    time.Duration
}

func TestFakeAdvanceFiresInDeadlineOrder(t *testing.T) {
	type advance struct {
		by          time.Duration
		wantFired   []fired
		wantPending []time.Duration
	}
	tests := []struct {
		name     string
		timers   []timerSpec
		advances []advance
	}{
		{
			name:   "one advance past all",
			timers: []timerSpec{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}},
			advances: []advance{
				{by: 5 * time.Second, wantFired: []fired{{"a", time.Second}, {"b", 2 * time.Second}, {"c", 3 * time.Second}}},
			},
		},
		{
			name:   "equal deadlines in scheduling order",
			timers: []timerSpec{{"x", time.Second}, {"y", time.Second}, {"z", time.Second}},
			advances: []advance{
				{by: time.Second, wantFired: []fired{{"x", time.Second}, {"y", time.Second}, {"z", time.Second}}},
			},
		},
		{
			name:   "step by step",
			timers: []timerSpec{{"5s", 5 * time.Second}, {"1s", time.Second}, {"2s", 2 * time.Second}, {"3s", 3 * time.Second}},
			advances: []advance{
				{by: 2 * time.Second, wantFired: []fired{{"1s", time.Second}, {"2s", 2 * time.Second}}, wantPending: []time.Duration{time.Second, 3 * time.Second}},
				{by: 500 * time.Millisecond, wantPending: []time.Duration{500 * time.Millisecond, 2500 * time.Millisecond}},
				{by: 500*time.Millisecond - 1, wantPending: []time.Duration{1, 2*time.Second + 1}},
				{by: 1, wantFired: []fired{{"3s", 3 * time.Second}}, wantPending: []time.Duration{2 * time.Second}},
				{by: time.Hour, wantFired: []fired{{"5s", 5 * time.Second}}},
			},
		},
		{
			name:   "zero and negative durations fire on Advance(0) without moving time back",
			timers: []timerSpec{{"later", time.Second}, {"zero", 0}, {"past", -time.Second}},
			advances: []advance{
				{by: 0, wantFired: []fired{{"past", 0}, {"zero", 0}}, wantPending: []time.Duration{time.Second}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFake(start)
			var r firing
			for _, ts := range tt.timers {
				c.AfterFunc(ts.d, r.timer(c, ts.name))
			}
			elapsed := time.Duration(0)
			for i, a := range tt.advances {
				c.Advance(a.by)
				elapsed += a.by
				if got := r.take(); !slices.Equal(got, a.wantFired) {
					t.Errorf("advance %d by %v: fired %v, want %v", i, a.by, got, a.wantFired)
				}
				if got := c.Pending(); !slices.Equal(got, a.wantPending) {
					t.Errorf("advance %d by %v: Pending = %v, want %v", i, a.by, got, a.wantPending)
				}
				if got, want := c.Now(), start.Add(elapsed); !got.Equal(want) {
					t.Errorf("advance %d by %v: Now = %v, want %v", i, a.by, got, want)
				}
			}
		})
	}
}

func TestFakeStop(t *testing.T) {
	tests := []struct {
		name      string
		advance   time.Duration // before the first Stop
		wantFirst bool          // what the first Stop reports
		wantFired bool
	}{
		{"before it is due", 999 * time.Millisecond, true, false},
		{"after it fired", time.Second, false, true},
		{"without advancing", 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFake(start)
			var r firing
			tm := c.AfterFunc(time.Second, r.timer(c, "t"))
			other := c.AfterFunc(2*time.Second, r.timer(c, "other"))
			c.Advance(tt.advance)
			if got := tm.Stop(); got != tt.wantFirst {
				t.Errorf("first Stop() = %v, want %v", got, tt.wantFirst)
			}
			if tm.Stop() {
				t.Error("second Stop() = true, want false")
			}
			if got, want := c.Pending(), []time.Duration{2*time.Second - tt.advance}; !slices.Equal(got, want) {
				t.Errorf("Pending = %v, want %v (only the other timer)", got, want)
			}
			c.Advance(time.Hour)
			var want []fired
			if tt.wantFired {
				want = append(want, fired{"t", time.Second})
			}
			want = append(want, fired{"other", 2 * time.Second})
			if got := r.take(); !slices.Equal(got, want) {
				t.Errorf("fired %v, want %v", got, want)
			}
			if other.Stop() {
				t.Error("Stop() of a fired timer = true, want false")
			}
		})
	}
}

func TestFakeCallbackStopsLaterTimer(t *testing.T) {
	c := clock.NewFake(start)
	var r firing
	var later clock.Timer
	var stopped bool
	c.AfterFunc(time.Second, func() { stopped = later.Stop() })
	later = c.AfterFunc(2*time.Second, r.timer(c, "later"))
	c.Advance(3 * time.Second)
	if !stopped {
		t.Error("Stop() inside a callback = false, want true")
	}
	if got := r.take(); len(got) != 0 {
		t.Errorf("fired %v after Stop, want nothing", got)
	}
}

func TestFakeCallbackSchedules(t *testing.T) {
	tests := []struct {
		name        string
		advance     time.Duration
		wantFired   []fired
		wantPending []time.Duration
	}{
		{
			name:        "chain inside the span",
			advance:     5 * time.Second,
			wantFired:   []fired{{"first", time.Second}, {"second", 3 * time.Second}},
			wantPending: []time.Duration{8 * time.Second}, // third, due at 13 s
		},
		{
			name:        "follow-up due exactly at the end of the span",
			advance:     3 * time.Second,
			wantFired:   []fired{{"first", time.Second}, {"second", 3 * time.Second}},
			wantPending: []time.Duration{10 * time.Second},
		},
		{
			name:        "follow-up beyond the span",
			advance:     3*time.Second - 1,
			wantFired:   []fired{{"first", time.Second}},
			wantPending: []time.Duration{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFake(start)
			var r firing
			third := r.timer(c, "third")
			second := r.timer(c, "second")
			first := r.timer(c, "first")
			c.AfterFunc(time.Second, func() {
				first()
				c.AfterFunc(2*time.Second, func() {
					second()
					c.AfterFunc(10*time.Second, third)
				})
			})
			c.Advance(tt.advance)
			if got := r.take(); !slices.Equal(got, tt.wantFired) {
				t.Errorf("fired %v, want %v", got, tt.wantFired)
			}
			if got := c.Pending(); !slices.Equal(got, tt.wantPending) {
				t.Errorf("Pending = %v, want %v", got, tt.wantPending)
			}
		})
	}
}

func TestFakeZeroDelayChainFiresWithinAdvance(t *testing.T) {
	c := clock.NewFake(start)
	n := 0
	var again func()
	again = func() {
		n++
		if n < 100 {
			c.AfterFunc(0, again)
		}
	}
	c.AfterFunc(time.Second, again)
	c.Advance(time.Second)
	if n != 100 {
		t.Errorf("chain of zero-delay timers ran %d times, want 100", n)
	}
	if p := c.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v, want none", p)
	}
}

// A callback that advances the clock itself must not see time go back when
// the outer Advance finishes.
func TestFakeAdvanceInsideCallbackIsMonotonic(t *testing.T) {
	c := clock.NewFake(start)
	c.AfterFunc(time.Second, func() { c.Advance(time.Minute) })
	c.Advance(2 * time.Second)
	if got, want := c.Now(), start.Add(time.Second+time.Minute); !got.Equal(want) {
		t.Errorf("Now = %v, want %v", got.Sub(start), want.Sub(start))
	}
}

func TestFakeScheduled(t *testing.T) {
	c := clock.NewFake(start)
	want := []time.Duration{3 * time.Second, time.Second, 0, time.Hour}
	for _, d := range want {
		tm := c.AfterFunc(d, func() {})
		if d == time.Hour {
			tm.Stop() // still reported: Scheduled is about AfterFunc calls
		}
	}
	for i, w := range want {
		if got := receive(t, c.Scheduled()); got != w {
			t.Errorf("Scheduled() value %d = %v, want %v", i, got, w)
		}
	}
	select {
	case d := <-c.Scheduled():
		t.Errorf("Scheduled() delivered an extra %v", d)
	default:
	}
}

// TestFakeScheduledFromAnotherGoroutine is the way tests use the fake: wait
// until the code under test has armed its timer, then advance past it.
func TestFakeScheduledFromAnotherGoroutine(t *testing.T) {
	c := clock.NewFake(start)
	done := make(chan time.Time, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		c.AfterFunc(30*time.Second, func() { done <- c.Now() })
	})
	if got := receive(t, c.Scheduled()); got != 30*time.Second {
		t.Fatalf("Scheduled() = %v, want 30s", got)
	}
	wg.Wait()
	c.Advance(30*time.Second - 1)
	select {
	case at := <-done:
		t.Fatalf("timer fired early, at %v", at.Sub(start))
	default:
	}
	c.Advance(1)
	select {
	case at := <-done:
		if want := start.Add(30 * time.Second); !at.Equal(want) {
			t.Errorf("callback saw Now = %v, want %v", at.Sub(start), want.Sub(start))
		}
	default:
		t.Fatal("timer did not fire during Advance")
	}
}

func TestFakeConcurrentUse(t *testing.T) {
	c := clock.NewFake(start)
	var mu sync.Mutex
	fired, stoppedEarly := 0, 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				tm := c.AfterFunc(time.Duration(i*50+j)*time.Millisecond, func() {
					mu.Lock()
					fired++
					mu.Unlock()
				})
				if j%2 == 0 && tm.Stop() {
					mu.Lock()
					stoppedEarly++
					mu.Unlock()
				}
				_ = c.Pending()
			}
		})
	}
	for range 100 {
		c.Advance(10 * time.Millisecond)
		_ = c.Now()
	}
	wg.Wait()
	c.Advance(time.Hour)
	if fired+stoppedEarly != 8*50 {
		t.Errorf("fired %d + stopped %d = %d, want %d: a timer was lost or ran after Stop", fired, stoppedEarly, fired+stoppedEarly, 8*50)
	}
	if p := c.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v after advancing past all, want none", p)
	}
}

// receive waits for one value from ch, failing tb after a deadline.
func receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatal("timed out waiting for a value")
		var zero T
		return zero
	}
}
