package explore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Compressed timings: a seed lasts seconds, not minutes. stop_timeout is
// at its floor (1 s: workers get it minus 1 s to finish their tasks).
const (
	Lease        = time.Second
	HBInterval   = 100 * time.Millisecond
	HBTTL        = time.Second
	StartTimeout = 5 * time.Second
	StopTimeout  = time.Second
	OpTimeout    = 500 * time.Millisecond
	TaskTimeout  = 1500 * time.Millisecond // a hung job is given up on after this
	BackoffBase  = 50 * time.Millisecond
	BackoffMax   = 400 * time.Millisecond
	CrashWindow  = time.Minute // longer than any seed: every counted crash is in it
	SampleEvery  = 50 * time.Millisecond
)

// Backends.
const (
	BackendMini  = "miniredis"
	BackendReal  = "redis-server"
	BackendMixed = "mixed"
	// Replicated topologies started from redis-server binaries: a master,
	// a replica and a sentinel; a Redis Cluster of 3 masters and 3
	// replicas. Their menu has failovers (menuFor).
	BackendSentinel = "sentinel"
	BackendCluster  = "cluster"
)

// Backends lists every backend a seed may run on (mixed is not one).
var Backends = []string{BackendMini, BackendReal, BackendSentinel, BackendCluster}

// topoBackend reports whether backend is a replicated topology.
func topoBackend(backend string) bool { return backend == BackendSentinel || backend == BackendCluster }

// Params is the world a seed builds, all drawn from the seed.
type Params struct {
	Seed            uint64
	Backend         string
	Hosts           int // hosts started at the beginning (a host-new step adds one)
	Pools           []PoolParams
	JobCrashRetries int // policy.job_crash_retries (0 = toxic after the first crash)
	MaxInWindow     int // crashes in CrashWindow that make a worker failed
	Faults          time.Duration
}

// PoolParams is one queue's pool.
type PoolParams struct {
	Queue       string
	Workers     int
	Concurrency int
	MaxRetry    int // of its sleep jobs
}

func (p Params) String() string {
	var pools []string
	for _, q := range p.Pools {
		pools = append(pools, fmt.Sprintf("%s=%d×c%d", q.Queue, q.Workers, q.Concurrency))
	}
	return fmt.Sprintf("seed %d: %s, %d hosts, pools %s, job_crash_retries %d, max_in_window %d, faults for %s",
		p.Seed, p.Backend, p.Hosts, strings.Join(pools, " "), p.JobCrashRetries, p.MaxInWindow, p.Faults)
}

// drawParams draws a seed's world; backend is BackendMini, BackendReal or
// BackendMixed (then by the seed's parity).
func drawParams(seed uint64, backend string, r *rand.Rand) Params {
	if backend == BackendMixed {
		backend = BackendMini
		if seed%2 == 1 {
			backend = BackendReal
		}
	}
	p := Params{
		Seed:            seed,
		Backend:         backend,
		Hosts:           2 + r.IntN(2),
		JobCrashRetries: r.IntN(3),
		MaxInWindow:     3 + r.IntN(3),
		Faults:          1500*time.Millisecond + time.Duration(r.IntN(2500))*time.Millisecond,
	}
	p.Pools = []PoolParams{
		{Queue: "a", Workers: 2 + r.IntN(2), Concurrency: 1 + r.IntN(2), MaxRetry: 3 + r.IntN(3)},
		{Queue: "b", Workers: 1 + r.IntN(2), Concurrency: 1, MaxRetry: 3 + r.IntN(3)},
	}
	return p
}
