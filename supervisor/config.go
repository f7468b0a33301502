package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/policy"
)

// Defaults of docs/design.md §4 and §10.
const (
	StopTimeoutDefault = 10 * time.Second
	LeaseDefault       = 15 * time.Second
	OpTimeoutDefault   = time.Second
	ConcurrencyDefault = 1
	TaskTimeoutDefault = 30 * time.Minute
	// LogTailDefault is how many bytes of a worker's latest output lines
	// are kept for the API.
	LogTailDefault = 256 << 10
	// MaxLogLineDefault is the longest output line kept whole; the rest of
	// a longer line is dropped and counted in a marker.
	MaxLogLineDefault  = 16 << 10
	MaxPoolSizeDefault = 1000
)

// Pool is one queue's workers on this host.
type Pool struct {
	Queue       string
	Workers     int
	Command     []string
	Concurrency int
	TaskTimeout time.Duration
	Env         map[string]string
	Dir         string // working directory, "" = the supervisor's
}

// Heartbeat holds the heartbeat timing handed to workers, by which the
// monitor judges them.
type Heartbeat struct {
	Interval     time.Duration
	TTL          time.Duration
	StartTimeout time.Duration
	// RecoverMin and RecoverMax bound the recovering windows workers ask
	// for (0: health.RecoverMinDefault, RecoverMaxDefault).
	RecoverMin time.Duration
	RecoverMax time.Duration
}

// Recoverer puts back the tasks a dead worker was running. The supervisor
// calls it only after it has reaped the process with that pid (docs/design.md
// §9: on a live worker it would make tasks run twice). Package queue
// implements it.
//
// crashed says the process died unasked (a crash, or a kill for a hang):
// each task whose handler had begun counts one crash towards the toxic
// rule. A process that was asked to stop (an operator's or the host's
// stop, a release, a fence) or whose supervisor ended did not crash: its
// tasks are put back and nothing is counted. A worker stopped while Redis
// is away cannot requeue its task itself, and a crash counted for it
// would archive the task as toxic without a run
// (TestCleanExitAfterStopRecoversTasks; queue's
// TestRecoverAfterAStopCountsNoCrash).
type Recoverer interface {
	Recover(ctx context.Context, id health.ComponentID, pid int, crashed bool) (requeued int, err error)
}

// StatsSource reads queue statistics as JSON-able values, one per queue,
// for the leader's queue_update events (package queue's Control.Stats).
type StatsSource func(ctx context.Context, queues []string) (map[string]any, error)

// Alerter is told, at once, of what an operator must hear of: a worker
// turned failed ("worker_failed"), a host was lost ("host_lost"); ev is the
// health.Event announced on the stream. Notify must never block (package
// alert's Webhook queues and returns).
type Alerter interface {
	Notify(kind string, ev any) bool
}

// Config configures a Supervisor.
type Config struct {
	Host     string // host id (docs/design.md §2)
	Instance string // random id of this start; "" = generated
	RedisURL string // handed to children as VIGIL_REDIS_URL
	Prefix   string
	Pools    []Pool
	// InheritEnv names the variables of the supervisor's environment that
	// workers inherit besides PATH, HOME, LANG, TZ and USER (a trailing *
	// matches a prefix, e.g. "LC_*"). Nothing else of it reaches them.
	InheritEnv []string
	// LogTail bounds, in bytes, the output kept per worker for the API
	// (LogTailDefault); MaxLogLine bounds one line (MaxLogLineDefault).
	LogTail    int
	MaxLogLine int

	// Lease is the slot, host and leader lease (renewed at a third of it).
	Lease time.Duration
	// Capacity is the most slots this host runs (0 = no limit).
	Capacity int
	// MaxPoolSize caps the pool sizes this host follows from Redis (a
	// larger one is logged and capped), and the configured ones
	// (0 = MaxPoolSizeDefault).
	MaxPoolSize int
	// Address is the admin server's address, shown in the host record.
	Address string
	// Version is shown in the host record.
	Version string
	// Stats, if set, gives the leader the queue statistics it announces.
	Stats StatsSource
	// OnLeader, if set, hears after every leader step whether this host
	// holds the leader lease and until when at least (the moment before
	// the claim or renewal, plus the lease), and false when it gives the
	// lease up. Package schedule's Scheduler.Leading fires periodic tasks
	// only then. It must not block.
	OnLeader func(leading bool, until time.Time)

	Heartbeat   Heartbeat
	Policy      policy.Config
	StopTimeout time.Duration
	// OpTimeout bounds each Redis call of the monitor.
	OpTimeout time.Duration

	Recoverer Recoverer
	// Alerts, if set, hears of failed workers and lost hosts.
	Alerts Alerter
	// Metrics, if set, counts crashes, restarts, failures, recovered tasks
	// and lost hosts, and times crash detection.
	Metrics *metrics.Metrics
	Clock   clock.Clock
	Logger  *slog.Logger
	// Rand returns a uniform number in [0, 1) for backoff jitter.
	Rand func() float64
}

func (c Config) withDefaults() Config {
	if c.Instance == "" {
		c.Instance = fmt.Sprintf("%016x", rand.Uint64())
	}
	if c.Heartbeat.Interval == 0 {
		c.Heartbeat.Interval = health.HeartbeatIntervalDefault
	}
	if c.Heartbeat.TTL == 0 {
		c.Heartbeat.TTL = health.HeartbeatTTLDefault
	}
	if c.Heartbeat.StartTimeout == 0 {
		c.Heartbeat.StartTimeout = health.StartTimeoutDefault
	}
	c.Heartbeat.RecoverMin = cmp.Or(c.Heartbeat.RecoverMin, health.RecoverMinDefault)
	c.Heartbeat.RecoverMax = cmp.Or(c.Heartbeat.RecoverMax, health.RecoverMaxDefault)
	c.Policy = c.Policy.WithDefaults()
	if c.StopTimeout == 0 {
		c.StopTimeout = StopTimeoutDefault
	}
	if c.Lease == 0 {
		c.Lease = LeaseDefault
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = OpTimeoutDefault
	}
	if c.MaxPoolSize == 0 {
		c.MaxPoolSize = MaxPoolSizeDefault
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.LogTail == 0 {
		c.LogTail = LogTailDefault
	}
	if c.MaxLogLine == 0 {
		c.MaxLogLine = min(MaxLogLineDefault, c.LogTail)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	pools := make([]Pool, len(c.Pools))
	for i, p := range c.Pools {
		if p.Concurrency == 0 {
			p.Concurrency = ConcurrencyDefault
		}
		if p.TaskTimeout == 0 {
			p.TaskTimeout = TaskTimeoutDefault
		}
		pools[i] = p
	}
	c.Pools = pools
	return c
}

func (c Config) validate() error {
	if err := health.CheckName("host", c.Host); err != nil {
		return err
	}
	hb := c.Heartbeat
	switch {
	case hb.Interval <= 0:
		return errors.New("heartbeat.interval must be > 0")
	case hb.TTL <= hb.Interval:
		return fmt.Errorf("heartbeat.ttl (%s) must be greater than heartbeat.interval (%s)", hb.TTL, hb.Interval)
	case hb.StartTimeout <= 0:
		return errors.New("heartbeat.start_timeout must be > 0")
	case hb.RecoverMin < 0 || hb.RecoverMax < hb.RecoverMin:
		return fmt.Errorf("heartbeat.recover_min (%s) must be >= 0 and at most heartbeat.recover_max (%s)", hb.RecoverMin, hb.RecoverMax)
	case c.Lease < 300*time.Millisecond:
		return fmt.Errorf("lease must be at least 300ms, got %s", c.Lease)
	case c.Capacity < 0:
		return errors.New("capacity must be >= 0")
	case c.LogTail < 1 || c.MaxLogLine < 1 || c.MaxLogLine > c.LogTail:
		return fmt.Errorf("log tail (%d bytes) and max line (%d bytes) must be > 0, the line no longer than the tail", c.LogTail, c.MaxLogLine)
	case c.MaxPoolSize < 1:
		return errors.New("max_pool_size must be >= 1")
	case c.StopTimeout < time.Second:
		return fmt.Errorf("stop_timeout must be at least 1s (workers get it minus 1s), got %s", c.StopTimeout)
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	for _, n := range c.InheritEnv {
		if name := strings.TrimSuffix(n, "*"); name == "" || strings.ContainsAny(name, "=*\x00") {
			return fmt.Errorf("inherit_env: %q is no variable name (a trailing * matches a prefix)", n)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		if err := health.CheckName(fmt.Sprintf("pools[%d].queue", i), p.Queue); err != nil {
			return err
		}
		if seen[p.Queue] {
			return fmt.Errorf("pools[%d].queue: duplicate queue %q", i, p.Queue)
		}
		seen[p.Queue] = true
		switch {
		case len(p.Command) == 0 || p.Command[0] == "":
			return fmt.Errorf("pools[%d].command: empty command for queue %q", i, p.Queue)
		case p.Workers < 0 || p.Workers > c.MaxPoolSize:
			return fmt.Errorf("pools[%d].workers must be from 0 to max_pool_size (%d), got %d", i, c.MaxPoolSize, p.Workers)
		case p.Concurrency < 1:
			return fmt.Errorf("pools[%d].concurrency must be >= 1", i)
		case p.TaskTimeout < 0:
			return fmt.Errorf("pools[%d].task_timeout must be >= 0", i)
		}
	}
	return nil
}
