package policy

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults of docs/design.md §5.
const (
	BackoffBaseDefault     = time.Second
	BackoffMaxDefault      = 60 * time.Second
	WindowDefault          = 5 * time.Minute
	MaxInWindowDefault     = 5
	MaxLifetimeDefault     = 20
	StableAfterDefault     = 5 * time.Minute
	JobCrashRetriesDefault = 2
)

// Reasons a component is marked failed.
const (
	ReasonRapid    = "rapid"
	ReasonLifetime = "lifetime"
)

// Config holds the restart limits. Zero fields take the defaults (see
// WithDefaults); Jitter 0 means no jitter.
type Config struct {
	BackoffBase time.Duration `yaml:"backoff_base" json:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max" json:"backoff_max"`
	// Jitter is a fraction: the delay is multiplied by a factor drawn from
	// [1-Jitter, 1+Jitter].
	Jitter      float64       `yaml:"jitter" json:"jitter"`
	Window      time.Duration `yaml:"window" json:"window"`
	MaxInWindow int           `yaml:"max_in_window" json:"max_in_window"`
	MaxLifetime int           `yaml:"max_lifetime" json:"max_lifetime"`
	StableAfter time.Duration `yaml:"stable_after" json:"stable_after"`
	// JobCrashRetries is how many times a task may be retried after crashing
	// its worker before it is archived as toxic (used by package queue).
	// nil takes the default (JobCrashRetriesDefault); a pointer to 0 means
	// toxic after the first crash, so that an explicit 0 survives
	// WithDefaults, however many times it is applied. Read it with
	// CrashRetries.
	JobCrashRetries *int `yaml:"job_crash_retries" json:"job_crash_retries"`
}

// CrashRetries returns JobCrashRetries, or its default when unset.
func (c Config) CrashRetries() int {
	if c.JobCrashRetries == nil {
		return JobCrashRetriesDefault
	}
	return *c.JobCrashRetries
}

// WithDefaults returns c with every zero field set to its default
// (JobCrashRetries: every nil one). Applying it twice changes nothing.
func (c Config) WithDefaults() Config {
	if c.BackoffBase == 0 {
		c.BackoffBase = BackoffBaseDefault
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = BackoffMaxDefault
	}
	if c.Window == 0 {
		c.Window = WindowDefault
	}
	if c.MaxInWindow == 0 {
		c.MaxInWindow = MaxInWindowDefault
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = MaxLifetimeDefault
	}
	if c.StableAfter == 0 {
		c.StableAfter = StableAfterDefault
	}
	if c.JobCrashRetries == nil {
		c.JobCrashRetries = new(JobCrashRetriesDefault)
	}
	return c
}

// Validate reports the first field that makes no sense, by its config name.
func (c Config) Validate() error {
	switch {
	case c.BackoffBase <= 0:
		return errors.New("policy.backoff_base must be > 0")
	case c.BackoffMax < c.BackoffBase:
		return errors.New("policy.backoff_max must be >= policy.backoff_base")
	case !(c.Jitter >= 0 && c.Jitter < 1): // also rejects NaN
		return fmt.Errorf("policy.jitter must be in [0, 1), got %v", c.Jitter)
	case c.Window <= 0:
		return errors.New("policy.window must be > 0")
	case c.MaxInWindow < 1:
		return errors.New("policy.max_in_window must be >= 1")
	case c.MaxLifetime < 1:
		return errors.New("policy.max_lifetime must be >= 1")
	case c.StableAfter <= 0:
		return errors.New("policy.stable_after must be > 0")
	case c.CrashRetries() < 0:
		return errors.New("policy.job_crash_retries must be >= 0")
	}
	return nil
}

// State is a component's restart history.
type State struct {
	RestartCount     int         // consecutive restarts, drives the backoff
	LifetimeRestarts int         // every counted restart since the last reset
	Crashes          []time.Time // counted crashes inside the window, oldest first
	LastRestart      time.Time   // when the last restart was decided
	FailedAt         time.Time   // zero unless failed
	FailureReason    string
}

// Crash describes one counted crash.
type Crash struct {
	At time.Time
	// HealthySince is when the component last became healthy, zero if it
	// was not healthy when it crashed.
	HealthySince time.Time
}

// Decision is the outcome of a crash.
type Decision struct {
	State  State         // the new state, to be stored
	Failed bool          // no restart: the component is failed
	Delay  time.Duration // backoff before the restart, when not failed
}

// Decide applies docs/design.md §5 to one counted crash. u is a uniform random
// number in [0, 1) used for jitter (ignored when Jitter is 0).
func (c Config) Decide(s State, cr Crash, u float64) Decision {
	t := cr.At
	// 1. Stable-run decay.
	if !cr.HealthySince.IsZero() && t.Sub(cr.HealthySince) >= c.StableAfter {
		s.RestartCount = 0
	}
	// 2. Crash window (t - window, t].
	s.Crashes = InWindow(append(append([]time.Time(nil), s.Crashes...), t), t, c.Window)
	// 3. Rapid limit.
	if len(s.Crashes) >= c.MaxInWindow {
		s.FailedAt, s.FailureReason = t, fmt.Sprintf("%s: %d crashes within %s", ReasonRapid, len(s.Crashes), c.Window)
		return Decision{State: s, Failed: true}
	}
	// 4. Lifetime limit.
	if s.LifetimeRestarts >= c.MaxLifetime {
		s.FailedAt, s.FailureReason = t, fmt.Sprintf("%s: %d restarts", ReasonLifetime, s.LifetimeRestarts)
		return Decision{State: s, Failed: true}
	}
	// 5. Restart.
	d := c.Backoff(s.RestartCount, u)
	s.RestartCount++
	s.LifetimeRestarts++
	s.LastRestart = t
	return Decision{State: s, Delay: d}
}

// Backoff returns min(base × 2^n, max) × (1 ± jitter), u in [0, 1) choosing
// the factor.
func (c Config) Backoff(n int, u float64) time.Duration {
	d := c.BackoffMax
	if n < 62 {
		if b := float64(c.BackoffBase) * math.Pow(2, float64(n)); b < float64(c.BackoffMax) {
			d = time.Duration(b)
		}
	}
	if c.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - c.Jitter + 2*c.Jitter*u))
	}
	return d
}

// InWindow keeps the times in (t - window, t], in order.
func InWindow(times []time.Time, t time.Time, window time.Duration) []time.Time {
	lo := t.Add(-window)
	kept := times[:0]
	for _, x := range times {
		if x.After(lo) && !x.After(t) {
			kept = append(kept, x)
		}
	}
	return kept
}

// Reset is the operator reset: counters, window and failure cleared.
func Reset(State) State { return State{} }

// OperatorRestart clears the window and the consecutive count of a failed
// (or any) component but keeps its lifetime count (docs/design.md §5).
func OperatorRestart(s State) State {
	s.RestartCount = 0
	s.Crashes = nil
	s.FailedAt = time.Time{}
	s.FailureReason = ""
	return s
}
