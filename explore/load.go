package explore

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Overload thresholds. The explorer runs on real time with compressed
// timings (a lease of 1 s, an op_timeout of 500 ms): on a machine so busy
// that the sampler wakes a quarter of a second late, or that a read of a
// healthy Redis takes as long, hosts miss their leases and time out on
// their own and a violation says more about the machine than about Vigil.
const (
	overLate  = 250 * time.Millisecond
	overRedis = 250 * time.Millisecond
	// overReap: a SIGKILLed supervisor is reaped in a few milliseconds
	// on a quiet machine.
	overReap = 250 * time.Millisecond
)

// loadAvg reads the 1-minute load average (0 if unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// loadMeter measures how busy the machine was during a seed: how late the
// sampler woke, how slow Redis answered it outside of Redis faults.
type loadMeter struct {
	mu                sync.Mutex
	maxLate, maxRedis time.Duration
	lateN, slowN      int
	maxLoad           float64
	hostLate          time.Duration // the worst lag a host reported
	hostLateN         int
	maxReap           time.Duration // the slowest reaping of a SIGKILLed host
	slowReapN         int
}

// reap records that a SIGKILLed host took d to be reaped.
func (m *loadMeter) reap(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxReap = max(m.maxReap, d)
	if d > overReap {
		m.slowReapN++
	}
}

// hostLag records that a host process woke d late.
func (m *loadMeter) hostLag(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hostLate = max(m.hostLate, d)
	m.hostLateN++
}

func (m *loadMeter) load(v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxLoad = max(m.maxLoad, v)
}

func (m *loadMeter) late(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxLate = max(m.maxLate, d)
	if d > overLate {
		m.lateN++
	}
}

func (m *loadMeter) redis(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxRedis = max(m.maxRedis, d)
	if d > overRedis {
		m.slowN++
	}
}

// overloaded says whether the seed ran on an overloaded machine, and why.
func (m *loadMeter) overloaded() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	why := fmt.Sprintf("sampler up to %s late (%d times over %s), hosts up to %s late (%d times), Redis reads up to %s (%d over %s), SIGKILLed hosts reaped in up to %s (%d over %s), load average up to %.1f",
		m.maxLate.Round(time.Millisecond), m.lateN, overLate, m.hostLate.Round(time.Millisecond), m.hostLateN,
		m.maxRedis.Round(time.Millisecond), m.slowN, overRedis, m.maxReap.Round(time.Millisecond), m.slowReapN, overReap, m.maxLoad)
	return m.lateN > 0 || m.hostLateN > 0 || m.slowN > 1 || m.slowReapN > 0, why
}

// meterLag measures, until the returned func is called, how late a ticker
// of SampleEvery wakes: the sampler's lateness without its reads, for the
// phases it does not run in: a stall of the whole machine during the
// final stops (every worker of several seeds' hosts exiting seconds late
// in the same instant, with the sampler stopped by then) flags the seed
// overloaded, and its failure counts as inconclusive, the machine's, not
// Vigil's (TestLoadMeter).
func (w *world) meterLag() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(SampleEvery)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			w.load.late(time.Since(last) - SampleEvery)
			last = time.Now()
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
