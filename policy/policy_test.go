package policy_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/policy"
)

// t0 is an arbitrary origin for the crash times below.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// ms is a duration written m:ss, as in docs/design.md §5.
func ms(m, s int) time.Duration {
	return time.Duration(m)*time.Minute + time.Duration(s)*time.Second
}

// step is one counted crash and what Decide must answer.
type step struct {
	at           time.Duration // since t0
	healthySince time.Duration // since t0; negative: not healthy when it crashed
	wantFailed   bool
	wantReason   string // prefix of FailureReason, when failed
	wantDelay    time.Duration
	wantCount    int // RestartCount after the crash
	wantLifetime int // LifetimeRestarts after the crash
	wantInWindow int // len(Crashes) after the crash
}

const notHealthy = -1

// replay feeds steps to Decide one after the other, starting from an empty
// State, and returns the final State.
func replay(tb testing.TB, c policy.Config, steps []step) policy.State {
	tb.Helper()
	var s policy.State
	for i, st := range steps {
		cr := policy.Crash{At: t0.Add(st.at)}
		if st.healthySince >= 0 {
			cr.HealthySince = t0.Add(st.healthySince)
		}
		d := c.Decide(s, cr, 0.5)
		checkDecision(tb, i, st, d)
		s = d.State
	}
	return s
}

func checkDecision(tb testing.TB, i int, st step, d policy.Decision) {
	tb.Helper()
	at := t0.Add(st.at)
	if d.Failed != st.wantFailed {
		tb.Fatalf("crash %d at +%v: Failed = %v, want %v (state %+v)", i+1, st.at, d.Failed, st.wantFailed, d.State)
	}
	if d.Delay != st.wantDelay {
		tb.Errorf("crash %d at +%v: Delay = %v, want %v", i+1, st.at, d.Delay, st.wantDelay)
	}
	if got := d.State.RestartCount; got != st.wantCount {
		tb.Errorf("crash %d at +%v: RestartCount = %d, want %d", i+1, st.at, got, st.wantCount)
	}
	if got := d.State.LifetimeRestarts; got != st.wantLifetime {
		tb.Errorf("crash %d at +%v: LifetimeRestarts = %d, want %d", i+1, st.at, got, st.wantLifetime)
	}
	if got := len(d.State.Crashes); got != st.wantInWindow {
		tb.Errorf("crash %d at +%v: %d crashes in window, want %d (%v)", i+1, st.at, got, st.wantInWindow, d.State.Crashes)
	}
	if n := len(d.State.Crashes); n > 0 && !d.State.Crashes[n-1].Equal(at) {
		tb.Errorf("crash %d at +%v: newest crash in window = %v, want %v", i+1, st.at, d.State.Crashes[n-1], at)
	}
	if st.wantFailed {
		if !d.State.FailedAt.Equal(at) {
			tb.Errorf("crash %d at +%v: FailedAt = %v, want %v", i+1, st.at, d.State.FailedAt, at)
		}
		if !strings.HasPrefix(d.State.FailureReason, st.wantReason+":") {
			tb.Errorf("crash %d at +%v: FailureReason = %q, want prefix %q", i+1, st.at, d.State.FailureReason, st.wantReason+":")
		}
		return
	}
	if !d.State.FailedAt.IsZero() || d.State.FailureReason != "" {
		tb.Errorf("crash %d at +%v: restarted but FailedAt = %v, FailureReason = %q", i+1, st.at, d.State.FailedAt, d.State.FailureReason)
	}
	if !d.State.LastRestart.Equal(at) {
		tb.Errorf("crash %d at +%v: LastRestart = %v, want %v", i+1, st.at, d.State.LastRestart, at)
	}
}

// rapidSteps is the first worked example of docs/design.md §5. Each restarted
// worker is healthy for a few seconds before it crashes again: far less than
// stable_after, so no decay.
func rapidSteps() []step {
	return []step{
		{at: ms(0, 0), healthySince: notHealthy, wantDelay: 1 * time.Second, wantCount: 1, wantLifetime: 1, wantInWindow: 1},
		{at: ms(0, 5), healthySince: ms(0, 3), wantDelay: 2 * time.Second, wantCount: 2, wantLifetime: 2, wantInWindow: 2},
		{at: ms(0, 15), healthySince: ms(0, 9), wantDelay: 4 * time.Second, wantCount: 3, wantLifetime: 3, wantInWindow: 3},
		{at: ms(0, 35), healthySince: ms(0, 21), wantDelay: 8 * time.Second, wantCount: 4, wantLifetime: 4, wantInWindow: 4},
		{at: ms(1, 10), healthySince: ms(0, 45), wantFailed: true, wantReason: policy.ReasonRapid, wantCount: 4, wantLifetime: 4, wantInWindow: 5},
	}
}

// everyTenMinutes is the second worked example of docs/design.md §5: a worker that
// comes up healthy 5 s after each restart and crashes every 10 minutes.
func everyTenMinutes() []step {
	var steps []step
	for k := 1; k <= 21; k++ {
		at := time.Duration(k) * 10 * time.Minute
		// Started at t0 (k = 1) or restarted 1 s after the previous crash.
		started := at - 10*time.Minute
		if k > 1 {
			started += time.Second
		}
		st := step{
			at:           at,
			healthySince: started + 5*time.Second,
			wantDelay:    time.Second,
			wantCount:    1,
			wantLifetime: k,
			wantInWindow: 1,
		}
		if k == 21 {
			st.wantFailed, st.wantReason = true, policy.ReasonLifetime
			st.wantDelay, st.wantCount, st.wantLifetime = 0, 0, 20
		}
		steps = append(steps, st)
	}
	return steps
}

func TestDecideWorkedExamples(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{
			// Crashes at 0:00, 0:05, 0:15, 0:35 are restarted after 1, 2, 4,
			// 8 s; the crash at 1:10 is the 5th in 5 minutes → failed with
			// lifetime_restarts = 4.
			name:  "rapid crashes",
			steps: rapidSteps(),
		},
		{
			// Restarted each time after 1 s (decay) until the 21st crash,
			// which finds lifetime_restarts = 20 → failed.
			name:  "crash every 10 minutes",
			steps: everyTenMinutes(),
		},
	}
	c := policy.Config{}.WithDefaults()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replay(t, c, tt.steps)
		})
	}
}

func TestDecideWindowEdge(t *testing.T) {
	c := policy.Config{MaxInWindow: 2}.WithDefaults()
	tests := []struct {
		name       string
		after      time.Duration // the second crash, after the first
		wantFailed bool
	}{
		// The window is (t-window, t]: a crash exactly window ago is out.
		{"exactly window later", c.Window, false},
		{"1ns inside the window", c.Window - 1, true},
		{"same instant", 0, true},
		{"well after", 2 * c.Window, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := c.Decide(policy.State{}, policy.Crash{At: t0}, 0)
			if first.Failed {
				t.Fatalf("first crash failed: %+v", first.State)
			}
			d := c.Decide(first.State, policy.Crash{At: t0.Add(tt.after)}, 0)
			if d.Failed != tt.wantFailed {
				t.Fatalf("Failed = %v, want %v (window %v)", d.Failed, tt.wantFailed, d.State.Crashes)
			}
			wantInWindow := 1
			if tt.wantFailed {
				wantInWindow = 2
				if !strings.HasPrefix(d.State.FailureReason, policy.ReasonRapid) {
					t.Errorf("FailureReason = %q, want %q", d.State.FailureReason, policy.ReasonRapid)
				}
			}
			if got := len(d.State.Crashes); got != wantInWindow {
				t.Errorf("window holds %d crashes (%v), want %d", got, d.State.Crashes, wantInWindow)
			}
		})
	}
}

func TestInWindow(t *testing.T) {
	const w = time.Minute
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name  string
		times []time.Time
		want  []time.Time
	}{
		{"empty", nil, nil},
		{
			name:  "lower bound excluded, upper included",
			times: []time.Time{at(-w), at(-w + 1), at(0)},
			want:  []time.Time{at(-w + 1), at(0)},
		},
		{
			name:  "future excluded",
			times: []time.Time{at(-time.Second), at(1)},
			want:  []time.Time{at(-time.Second)},
		},
		{
			name:  "order kept",
			times: []time.Time{at(-2 * w), at(-30 * time.Second), at(-2 * w), at(-10 * time.Second)},
			want:  []time.Time{at(-30 * time.Second), at(-10 * time.Second)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.InWindow(tt.times, t0, w)
			if !equalTimes(got, tt.want) {
				t.Errorf("InWindow = %v, want %v", got, tt.want)
			}
		})
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func TestDecideStableRunDecay(t *testing.T) {
	c := policy.Config{}.WithDefaults()
	at := t0.Add(time.Hour)
	tests := []struct {
		name         string
		healthySince time.Time
		wantDelay    time.Duration
		wantCount    int
	}{
		{"healthy exactly stable_after", at.Add(-c.StableAfter), time.Second, 1},
		{"healthy longer", at.Add(-2 * c.StableAfter), time.Second, 1},
		{"healthy 1ns less than stable_after", at.Add(-c.StableAfter + 1), 8 * time.Second, 4},
		{"not healthy", time.Time{}, 8 * time.Second, 4},
		{"healthy since after the crash", at.Add(time.Second), 8 * time.Second, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := policy.State{RestartCount: 3, LifetimeRestarts: 7}
			d := c.Decide(s, policy.Crash{At: at, HealthySince: tt.healthySince}, 0)
			if d.Failed {
				t.Fatalf("failed: %+v", d.State)
			}
			if d.Delay != tt.wantDelay {
				t.Errorf("Delay = %v, want %v", d.Delay, tt.wantDelay)
			}
			if d.State.RestartCount != tt.wantCount {
				t.Errorf("RestartCount = %d, want %d", d.State.RestartCount, tt.wantCount)
			}
			// Decay never touches the lifetime count.
			if d.State.LifetimeRestarts != 8 {
				t.Errorf("LifetimeRestarts = %d, want 8", d.State.LifetimeRestarts)
			}
		})
	}
}

// TestDecideOrder checks the order of §5: decay, window, rapid limit, then
// lifetime limit.
func TestDecideOrder(t *testing.T) {
	c := policy.Config{}.WithDefaults()
	at := t0.Add(time.Hour)
	recent := []time.Time{at.Add(-4 * time.Minute), at.Add(-3 * time.Minute), at.Add(-2 * time.Minute), at.Add(-time.Minute)}
	tests := []struct {
		name       string
		state      policy.State
		crash      policy.Crash
		wantReason string
		wantCount  int
	}{
		{
			name:       "rapid before lifetime",
			state:      policy.State{RestartCount: 2, LifetimeRestarts: c.MaxLifetime, Crashes: recent},
			crash:      policy.Crash{At: at},
			wantReason: policy.ReasonRapid,
			wantCount:  2,
		},
		{
			name:       "lifetime once the window has room",
			state:      policy.State{RestartCount: 2, LifetimeRestarts: c.MaxLifetime, Crashes: recent[1:]},
			crash:      policy.Crash{At: at},
			wantReason: policy.ReasonLifetime,
			wantCount:  2,
		},
		{
			name:       "decay applies even when failing",
			state:      policy.State{RestartCount: 2, LifetimeRestarts: c.MaxLifetime},
			crash:      policy.Crash{At: at, HealthySince: at.Add(-c.StableAfter)},
			wantReason: policy.ReasonLifetime,
			wantCount:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.Decide(tt.state, tt.crash, 0)
			if !d.Failed {
				t.Fatalf("not failed: delay %v, state %+v", d.Delay, d.State)
			}
			if d.Delay != 0 {
				t.Errorf("Delay = %v on failure, want 0", d.Delay)
			}
			if !strings.HasPrefix(d.State.FailureReason, tt.wantReason+":") {
				t.Errorf("FailureReason = %q, want prefix %q", d.State.FailureReason, tt.wantReason+":")
			}
			if d.State.RestartCount != tt.wantCount {
				t.Errorf("RestartCount = %d, want %d", d.State.RestartCount, tt.wantCount)
			}
			if d.State.LifetimeRestarts != tt.state.LifetimeRestarts {
				t.Errorf("LifetimeRestarts = %d, want %d (a failure is no restart)", d.State.LifetimeRestarts, tt.state.LifetimeRestarts)
			}
			if !d.State.LastRestart.Equal(tt.state.LastRestart) {
				t.Errorf("LastRestart = %v, want it unchanged", d.State.LastRestart)
			}
		})
	}
}

func TestDecideDoesNotMutateCrashes(t *testing.T) {
	c := policy.Config{}.WithDefaults()
	at := t0.Add(time.Hour)
	// Two crashes that the window drops, one it keeps, and spare capacity
	// behind them that an in-place append or filter would overwrite.
	backing := make([]time.Time, 8)
	for i := range backing {
		backing[i] = t0.Add(time.Duration(i) * time.Nanosecond)
	}
	backing[2] = at.Add(-time.Minute)
	want := append([]time.Time(nil), backing...)
	s := policy.State{Crashes: backing[:3]}

	d1 := c.Decide(s, policy.Crash{At: at}, 0)
	d2 := c.Decide(s, policy.Crash{At: at.Add(time.Second)}, 0)

	if !equalTimes(backing, want) {
		t.Errorf("caller's backing array changed:\n got %v\nwant %v", backing, want)
	}
	if w := []time.Time{at.Add(-time.Minute), at}; !equalTimes(d1.State.Crashes, w) {
		t.Errorf("first decision's window = %v, want %v (clobbered by the second?)", d1.State.Crashes, w)
	}
	if w := []time.Time{at.Add(-time.Minute), at.Add(time.Second)}; !equalTimes(d2.State.Crashes, w) {
		t.Errorf("second decision's window = %v, want %v", d2.State.Crashes, w)
	}
}

func TestBackoffSequence(t *testing.T) {
	c := policy.Config{}.WithDefaults()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for n, w := range want {
		if got := c.Backoff(n, 0); got != w*time.Second {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, w*time.Second)
		}
	}
}

func TestBackoffHugeN(t *testing.T) {
	tests := []struct {
		name string
		c    policy.Config
	}{
		{"defaults", policy.Config{}.WithDefaults()},
		{"max at the top of Duration", policy.Config{BackoffBase: time.Second, BackoffMax: math.MaxInt64}},
		{"large base", policy.Config{BackoffBase: 1000 * time.Hour, BackoffMax: 100000 * time.Hour}},
		{"with jitter", policy.Config{Jitter: 0.5}.WithDefaults()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// From n = 61 on, base × 2^n exceeds every Duration of 1 s or more.
			for _, n := range []int{61, 62, 63, 64, 100, 1 << 20, math.MaxInt} {
				if got := tt.c.Backoff(n, 0.5); got != tt.c.BackoffMax {
					t.Errorf("Backoff(%d, 0.5) = %v, want BackoffMax %v", n, got, tt.c.BackoffMax)
				}
			}
		})
	}
}

func TestBackoffJitter(t *testing.T) {
	const n = 3 // 8 s before jitter
	almostOne := math.Nextafter(1, 0)
	tests := []struct {
		name   string
		jitter float64
		u      float64
		lo, hi time.Duration // inclusive bounds
	}{
		{"u=0 gives (1-j)d", 0.25, 0, 6 * time.Second, 6 * time.Second},
		{"u=0.5 gives d", 0.25, 0.5, 8 * time.Second, 8 * time.Second},
		{"u→1 stays <= (1+j)d", 0.25, almostOne, 10*time.Second - time.Microsecond, 10 * time.Second},
		{"half jitter, u=0", 0.5, 0, 4 * time.Second, 4 * time.Second},
		{"jitter 0 ignores u=0", 0, 0, 8 * time.Second, 8 * time.Second},
		{"jitter 0 ignores u→1", 0, almostOne, 8 * time.Second, 8 * time.Second},
		{"jitter 0 ignores u=0.3", 0, 0.3, 8 * time.Second, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := policy.Config{Jitter: tt.jitter}.WithDefaults()
			if got := c.Backoff(n, tt.u); got < tt.lo || got > tt.hi {
				t.Errorf("Backoff(%d, %v) with jitter %v = %v, want in [%v, %v]", n, tt.u, tt.jitter, got, tt.lo, tt.hi)
			}
		})
	}
}

func TestBackoffJitterBoundsAndMonotone(t *testing.T) {
	for _, j := range []float64{0.1, 0.25, 0.5, 0.9} {
		c := policy.Config{Jitter: j}.WithDefaults()
		for _, n := range []int{0, 3, 6, 100} {
			d := float64(c.Backoff(n, 0.5)) // no jitter at u = 0.5
			lo, hi := time.Duration((1-j)*d), time.Duration((1+j)*d)
			prev := time.Duration(0)
			for i := range 1000 {
				u := float64(i) / 1000
				got := c.Backoff(n, u)
				if got < lo || got > hi {
					t.Fatalf("jitter %v: Backoff(%d, %v) = %v, outside [%v, %v]", j, n, u, got, lo, hi)
				}
				if got < prev {
					t.Fatalf("jitter %v: Backoff(%d, %v) = %v < %v at a smaller u", j, n, u, got, prev)
				}
				prev = got
			}
		}
	}
}

func TestDecideUsesJitter(t *testing.T) {
	c := policy.Config{Jitter: 0.5}.WithDefaults()
	d := c.Decide(policy.State{RestartCount: 2}, policy.Crash{At: t0}, 0)
	if want := 2 * time.Second; d.Delay != want {
		t.Errorf("Delay = %v, want %v (4 s × (1-0.5))", d.Delay, want)
	}
}

func TestWithDefaults(t *testing.T) {
	defaults := policy.Config{
		BackoffBase:     policy.BackoffBaseDefault,
		BackoffMax:      policy.BackoffMaxDefault,
		Window:          policy.WindowDefault,
		MaxInWindow:     policy.MaxInWindowDefault,
		MaxLifetime:     policy.MaxLifetimeDefault,
		StableAfter:     policy.StableAfterDefault,
		JobCrashRetries: new(policy.JobCrashRetriesDefault),
	}
	custom := policy.Config{
		BackoffBase:     2 * time.Second,
		BackoffMax:      time.Minute + time.Second,
		Jitter:          0.1,
		Window:          time.Minute,
		MaxInWindow:     3,
		MaxLifetime:     7,
		StableAfter:     time.Hour,
		JobCrashRetries: new(9),
	}
	partial := defaults
	partial.BackoffMax, partial.MaxLifetime, partial.Jitter = 3*time.Second, 1, 0.2
	tests := []struct {
		name string
		in   policy.Config
		want policy.Config
	}{
		{"zero takes every default", policy.Config{}, defaults},
		{"set fields are kept", custom, custom},
		{
			name: "only zero fields are filled",
			in:   policy.Config{BackoffMax: 3 * time.Second, MaxLifetime: 1, Jitter: 0.2},
			want: partial,
		},
		{
			// Nonsense is kept for Validate to report, not papered over.
			name: "negative fields are kept",
			in:   policy.Config{BackoffBase: -1, MaxInWindow: -1, JobCrashRetries: new(-1)},
			want: func() policy.Config {
				c := defaults
				c.BackoffBase, c.MaxInWindow, c.JobCrashRetries = -1, -1, new(-1)
				return c
			}(),
		},
		{
			// Issue 12, defect 7: an explicit 0 is not "unset".
			name: "an explicit zero job_crash_retries is kept",
			in:   policy.Config{JobCrashRetries: new(0)},
			want: func() policy.Config {
				c := defaults
				c.JobCrashRetries = new(0)
				return c
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.WithDefaults()
			if !sameConfig(got, tt.want) {
				t.Errorf("WithDefaults() =\n %+v (retries %d)\nwant\n %+v (retries %d)", got, got.CrashRetries(), tt.want, tt.want.CrashRetries())
			}
			// Applied again (supervisor.New applies it to what a config
			// file already filled in), nothing changes.
			if again := got.WithDefaults(); !sameConfig(again, got) {
				t.Errorf("WithDefaults twice = %+v, once %+v", again, got)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*policy.Config)
		wantErr string // the field the error must name; "" for no error
	}{
		{"defaults", func(*policy.Config) {}, ""},
		{"max equal to base", func(c *policy.Config) { c.BackoffMax = c.BackoffBase }, ""},
		{"jitter just under 1", func(c *policy.Config) { c.Jitter = 0.999 }, ""},
		{"no job crash retries", func(c *policy.Config) { c.JobCrashRetries = new(0) }, ""},
		{"zero base", func(c *policy.Config) { c.BackoffBase = 0 }, "policy.backoff_base"},
		{"negative base", func(c *policy.Config) { c.BackoffBase = -time.Second }, "policy.backoff_base"},
		{"max below base", func(c *policy.Config) { c.BackoffMax = c.BackoffBase - 1 }, "policy.backoff_max"},
		{"negative jitter", func(c *policy.Config) { c.Jitter = -0.1 }, "policy.jitter"},
		{"jitter 1", func(c *policy.Config) { c.Jitter = 1 }, "policy.jitter"},
		{"jitter NaN", func(c *policy.Config) { c.Jitter = math.NaN() }, "policy.jitter"},
		{"jitter +Inf", func(c *policy.Config) { c.Jitter = math.Inf(1) }, "policy.jitter"},
		{"zero window", func(c *policy.Config) { c.Window = 0 }, "policy.window"},
		{"zero max_in_window", func(c *policy.Config) { c.MaxInWindow = 0 }, "policy.max_in_window"},
		{"zero max_lifetime", func(c *policy.Config) { c.MaxLifetime = 0 }, "policy.max_lifetime"},
		{"zero stable_after", func(c *policy.Config) { c.StableAfter = 0 }, "policy.stable_after"},
		{"negative job_crash_retries", func(c *policy.Config) { c.JobCrashRetries = new(-1) }, "policy.job_crash_retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := policy.Config{}.WithDefaults()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error naming %s", tt.wantErr)
			case tt.wantErr != "" && !strings.HasPrefix(err.Error(), tt.wantErr+" "):
				t.Fatalf("Validate() = %q, want it to name %s", err, tt.wantErr)
			}
		})
	}
}

func TestReset(t *testing.T) {
	s := policy.State{
		RestartCount:     4,
		LifetimeRestarts: 20,
		Crashes:          []time.Time{t0},
		LastRestart:      t0,
		FailedAt:         t0,
		FailureReason:    "lifetime: 20 restarts",
	}
	got := policy.Reset(s)
	if got.RestartCount != 0 || got.LifetimeRestarts != 0 || got.Crashes != nil ||
		!got.LastRestart.IsZero() || !got.FailedAt.IsZero() || got.FailureReason != "" {
		t.Errorf("Reset = %+v, want the zero State", got)
	}
	// After a reset the component starts over: first backoff again.
	d := policy.Config{}.WithDefaults().Decide(got, policy.Crash{At: t0.Add(time.Second)}, 0)
	if d.Failed || d.Delay != time.Second {
		t.Errorf("first crash after Reset: Failed = %v, Delay = %v, want a restart after 1s", d.Failed, d.Delay)
	}
}

func TestOperatorRestart(t *testing.T) {
	c := policy.Config{}.WithDefaults()
	tests := []struct {
		name      string
		steps     []step
		wantAfter step // the next crash, 20 minutes after the last one
	}{
		{
			// Failed by the rapid limit: the window is cleared, so the next
			// crash restarts after 1 s with the lifetime count kept.
			name:  "after rapid failure",
			steps: rapidSteps(),
			wantAfter: step{
				healthySince: notHealthy,
				wantDelay:    time.Second, wantCount: 1, wantLifetime: 5, wantInWindow: 1,
			},
		},
		{
			// Failed by the lifetime limit: kept, so the next crash fails again.
			name:  "after lifetime failure",
			steps: everyTenMinutes(),
			wantAfter: step{
				healthySince: notHealthy,
				wantFailed:   true, wantReason: policy.ReasonLifetime, wantCount: 0, wantLifetime: 20, wantInWindow: 1,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failed := replay(t, c, tt.steps)
			if failed.FailedAt.IsZero() {
				t.Fatalf("replay did not end failed: %+v", failed)
			}
			s := policy.OperatorRestart(failed)
			if s.RestartCount != 0 || s.Crashes != nil || !s.FailedAt.IsZero() || s.FailureReason != "" {
				t.Errorf("OperatorRestart = %+v, want RestartCount, Crashes, FailedAt and FailureReason cleared", s)
			}
			if s.LifetimeRestarts != failed.LifetimeRestarts {
				t.Errorf("LifetimeRestarts = %d, want %d kept", s.LifetimeRestarts, failed.LifetimeRestarts)
			}
			if !s.LastRestart.Equal(failed.LastRestart) {
				t.Errorf("LastRestart = %v, want %v kept", s.LastRestart, failed.LastRestart)
			}
			next := tt.wantAfter
			next.at = tt.steps[len(tt.steps)-1].at + 20*time.Minute
			d := c.Decide(s, policy.Crash{At: t0.Add(next.at)}, 0)
			checkDecision(t, len(tt.steps), next, d)
		})
	}
}

// sameConfig compares configs by value, JobCrashRetries included.
func sameConfig(a, b policy.Config) bool {
	if (a.JobCrashRetries == nil) != (b.JobCrashRetries == nil) || a.CrashRetries() != b.CrashRetries() {
		return false
	}
	a.JobCrashRetries, b.JobCrashRetries = nil, nil
	return a == b
}
