package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance is called. Callbacks of due
// timers run synchronously inside Advance, in deadline order.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan time.Duration // every AfterFunc's duration, for tests that wait on it
}

type fakeTimer struct {
	c    *Fake
	at   time.Time
	d    time.Duration
	f    func()
	done bool
}

// NewFake returns a fake clock set at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, added: make(chan time.Duration, 4096)}
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	t := &fakeTimer{c: c, at: c.now.Add(d), d: d, f: f}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	select {
	case c.added <- d:
	default:
	}
	return t
}

// Scheduled delivers the duration of every timer scheduled since the clock
// was made, in order. Tests receive from it with a deadline.
func (c *Fake) Scheduled() <-chan time.Duration { return c.added }

// Pending returns the durations from now of the timers not yet fired or
// stopped, shortest first.
func (c *Fake) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.timers {
		if !t.done {
			out = append(out, t.at.Sub(c.now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Advance moves the clock by d and runs the callbacks that fall due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			// A callback may itself have advanced the clock past target;
			// time never goes back.
			if target.After(c.now) {
				c.now = target
			}
			c.compact()
			c.mu.Unlock()
			return
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

func (c *Fake) compact() {
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.done {
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}
