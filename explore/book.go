package explore

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// book is what a seed has done so far: the schedule log (one line per
// fault or action), the windows in which hosts could not reach Redis (or
// were down), and the crashes injected into each slot. Safe for
// concurrent use.
type book struct {
	mu      sync.Mutex
	t0      time.Time
	lines   []string
	echo    func(string) // verbose mode: each line as it is logged
	windows []*window
	crashes map[string]int // component → crashes injected into its processes
	faulted map[int]bool   // processes a worker fault was injected into
	held    map[string]bool
	stats   map[Kind]int // steps that took effect, by kind
}

// window is a span in which host (all hosts for "") was disturbed.
type window struct {
	host     string
	from, to time.Time // to zero: still open
	why      string
}

func newBook(t0 time.Time, echo func(string)) *book {
	return &book{t0: t0, echo: echo, crashes: map[string]int{}, faulted: map[int]bool{}, held: map[string]bool{}, stats: map[Kind]int{}}
}

// logf appends one line to the schedule log, stamped with the seed's clock.
func (b *book) logf(format string, args ...any) {
	line := fmt.Sprintf("+%5.2fs ", time.Since(b.t0).Seconds()) + fmt.Sprintf(format, args...)
	b.mu.Lock()
	b.lines = append(b.lines, line)
	echo := b.echo
	b.mu.Unlock()
	if echo != nil {
		echo(line)
	}
}

func (b *book) log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

func (b *book) count(k Kind) {
	b.mu.Lock()
	b.stats[k]++
	b.mu.Unlock()
}

// open starts a disturbance of host ("" = every host).
func (b *book) open(host, why string) *window {
	w := &window{host: host, from: time.Now(), why: why}
	b.mu.Lock()
	b.windows = append(b.windows, w)
	b.mu.Unlock()
	return w
}

// close ends w (idempotent).
func (b *book) close(w *window) {
	b.mu.Lock()
	if w.to.IsZero() {
		w.to = time.Now()
	}
	b.mu.Unlock()
}

// blip is a disturbance of an instant (a lost reply, a flush).
func (b *book) blip(host, why string) { b.close(b.open(host, why)) }

// anyDisturbed reports whether any host was disturbed at some moment of
// [from, to].
func (b *book) anyDisturbed(from, to time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows {
		if !w.from.After(to) && (w.to.IsZero() || !w.to.Before(from)) {
			return true
		}
	}
	return false
}

// killed reports whether host was SIGKILLed at some moment of [from, to].
func (b *book) killed(host string, from, to time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows {
		if w.host == host && w.why == whyKilled && !w.from.After(to) && !w.from.Before(from) {
			return true
		}
	}
	return false
}

// Windows of a host's process, not of its Redis.
const (
	whyKilled  = "host killed"
	whyStopped = "host stopped"
)

// whyFailover is the window of a failover, from the fault to the new
// master's announcement: the hosts could not write, as in an outage, but
// it excuses no job run twice: the failover guard (internal/redisconn)
// holds every write through the switch, so a failover runs none twice
// (TestGuardHoldsAClientOpenedDuringAFailover).
const whyFailover = "redis failover"

// stoppedCut reports whether host was stopped gracefully at some moment of
// [from, to] and cut from Redis (a Redis fault, not its own stop) in that
// span too: what it had to requeue on the way out could not be.
func (b *book) stoppedCut(host string, from, to time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	stopped, cut := false, false
	for _, w := range b.windows {
		if w.host != "" && w.host != host {
			continue
		}
		if w.from.After(to) || (!w.to.IsZero() && w.to.Before(from)) {
			continue
		}
		switch w.why {
		case whyStopped:
			stopped = stopped || w.host == host
		case whyKilled:
		default:
			cut = true
		}
	}
	return stopped && cut
}

// disturbed reports whether host was disturbed at any moment of
// [from, to] or less than grace before from.
func (b *book) disturbed(host string, from, to time.Time, grace time.Duration) bool {
	return b.disturbedBut(host, from, to, grace, "")
}

// disturbedBut is disturbed, not counting the windows of why but.
func (b *book) disturbedBut(host string, from, to time.Time, grace time.Duration, but string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows {
		if w.host != "" && w.host != host || but != "" && w.why == but {
			continue
		}
		if w.from.After(to) {
			continue
		}
		if w.to.IsZero() || !w.to.Add(grace).Before(from) {
			return true
		}
	}
	return false
}

// excuses reports whether a process of host born at born may still be
// around at now because of a disturbance: one that began ahead of now, was
// under way after the process was born, and ended less than grace ago. A
// process born after its host's disturbances ended has no excuse.
func (b *book) excuses(host string, born, now time.Time, grace time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows {
		if w.host != "" && w.host != host {
			continue
		}
		if w.from.After(now) {
			continue
		}
		if w.to.IsZero() || (!w.to.Before(born) && !w.to.Add(grace).Before(now)) {
			return true
		}
	}
	return false
}

// quietSince is when the last disturbance ended (now if one is open).
func (b *book) quietSince() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var last time.Time
	for _, w := range b.windows {
		if w.to.IsZero() {
			return time.Now()
		}
		if w.to.After(last) {
			last = w.to
		}
	}
	return last
}

func (b *book) crashed(comp string, pid int) {
	b.mu.Lock()
	b.crashes[comp]++
	b.faulted[pid] = true
	b.mu.Unlock()
}

// wasFaulted reports whether a worker fault was injected into process pid.
func (b *book) wasFaulted(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.faulted[pid]
}

func (b *book) crashCount(comp string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.crashes[comp]
}

// holdable notes an operator action that may leave comp held stopped.
func (b *book) holdable(comp string) {
	b.mu.Lock()
	b.held[comp] = true
	b.mu.Unlock()
}

func (b *book) mayBeHeld(comp string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[comp]
}
