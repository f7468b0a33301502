package health

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Environment handed to every worker (docs/design.md §4.1).
const (
	EnvRedisURL    = "VIGIL_REDIS_URL"
	EnvPrefix      = "VIGIL_PREFIX"
	EnvComponent   = "VIGIL_COMPONENT"
	EnvQueue       = "VIGIL_QUEUE"
	EnvSlot        = "VIGIL_SLOT"
	EnvHost        = "VIGIL_HOST"
	EnvConcurrency = "VIGIL_CONCURRENCY"
	EnvTaskTimeout = "VIGIL_TASK_TIMEOUT"
	// EnvMaxTaskTimeout caps every task's timeout, its own included
	// (optional, per pool; absent: no cap).
	EnvMaxTaskTimeout    = "VIGIL_MAX_TASK_TIMEOUT"
	EnvHeartbeatInterval = "VIGIL_HEARTBEAT_INTERVAL"
	EnvHeartbeatTTL      = "VIGIL_HEARTBEAT_TTL"
	EnvShutdownTimeout   = "VIGIL_SHUTDOWN_TIMEOUT"
	// EnvRecoverMin and EnvRecoverMax bound a recovering window (the
	// heartbeat script's recover_min and recover_max).
	EnvRecoverMin = "VIGIL_RECOVER_MIN"
	EnvRecoverMax = "VIGIL_RECOVER_MAX"
	// EnvVersion is the worker's version, as it reports it in its
	// heartbeat (set it in the pool's env; Vigil does not). Without it the
	// Go runtime reports its binary's build info.
	EnvVersion         = "VIGIL_VERSION"
	EnvJobCrashRetries = "VIGIL_JOB_CRASH_RETRIES"
	// EnvMaxConsecutiveFailures makes a worker whose last N tasks all
	// failed exit non-zero (0 or absent: never).
	EnvMaxConsecutiveFailures = "VIGIL_MAX_CONSECUTIVE_FAILURES"
	// EnvSpawn is unique to one start of one worker; its descendants
	// inherit it, which is how the supervisor finds those that left the
	// worker's process group.
	EnvSpawn = "VIGIL_SPAWN_ID"
	// Optional, per pool (docs/design.md §6, §10): scratch directories and
	// backpressure. Absent means the default (off).
	EnvKeepScratch = "VIGIL_KEEP_SCRATCH_ON_SUCCESS"
	EnvScratchDir  = "VIGIL_SCRATCH_DIR"
	// EnvResultsDir is where published outputs go (queue.Publish); ""
	// = a vigil-results folder in the temp dir.
	EnvResultsDir                = "VIGIL_RESULTS_DIR"
	EnvBackpressureHighWatermark = "VIGIL_BACKPRESSURE_HIGH_WATERMARK"
	EnvBackpressureLoadThreshold = "VIGIL_BACKPRESSURE_LOAD_THRESHOLD"
	EnvBackpressurePauseInterval = "VIGIL_BACKPRESSURE_PAUSE_INTERVAL"
)

// BackpressurePauseIntervalDefault is how long backpressure stops dequeuing
// unless the pool says otherwise.
const BackpressurePauseIntervalDefault = 10 * time.Second

// WorkerEnv is what a worker learns from its environment.
type WorkerEnv struct {
	RedisURL          string
	Prefix            string
	Component         ComponentID
	Host              string
	Concurrency       int
	TaskTimeout       time.Duration
	MaxTaskTimeout    time.Duration // 0 = no cap
	HeartbeatInterval time.Duration
	HeartbeatTTL      time.Duration
	RecoverMin        time.Duration
	RecoverMax        time.Duration
	Version           string // VIGIL_VERSION ("": the Go runtime's build info)
	ShutdownTimeout   time.Duration
	JobCrashRetries   int
	// MaxConsecutiveFailures: exit once this many tasks in a row failed
	// (0: never).
	MaxConsecutiveFailures int

	KeepScratchOnSuccess bool
	ScratchDir           string // "" = a vigil-scratch folder in the temp dir
	ResultsDir           string // "" = a vigil-results folder in the temp dir
	Backpressure         Backpressure
}

// Backpressure is a pool's host-local backpressure (docs/design.md §6); a zero
// HighWatermark turns it off.
type Backpressure struct {
	HighWatermark int           // pending tasks above which the host may pause
	LoadThreshold float64       // host load (1-minute load average per CPU) above which it does
	PauseInterval time.Duration // how long it stops dequeuing
}

// LoadWorkerEnv reads and checks the VIGIL_* environment.
func LoadWorkerEnv() (WorkerEnv, error) {
	var e WorkerEnv
	var err error
	e.RedisURL = os.Getenv(EnvRedisURL)
	if e.RedisURL == "" {
		return e, fmt.Errorf("%s is not set: run this worker under vigil serve", EnvRedisURL)
	}
	e.Prefix = os.Getenv(EnvPrefix)
	if e.Component, err = ParseComponentID(os.Getenv(EnvComponent)); err != nil {
		return e, fmt.Errorf("%s: %w", EnvComponent, err)
	}
	e.Host = os.Getenv(EnvHost)
	e.Version = os.Getenv(EnvVersion)
	durs := []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{
		{EnvTaskTimeout, &e.TaskTimeout, 30 * time.Minute},
		{EnvHeartbeatInterval, &e.HeartbeatInterval, HeartbeatIntervalDefault},
		{EnvHeartbeatTTL, &e.HeartbeatTTL, HeartbeatTTLDefault},
		{EnvShutdownTimeout, &e.ShutdownTimeout, 9 * time.Second},
		{EnvRecoverMin, &e.RecoverMin, RecoverMinDefault},
		{EnvRecoverMax, &e.RecoverMax, RecoverMaxDefault},
	}
	for _, d := range durs {
		*d.dst = d.def
		if v := os.Getenv(d.name); v != "" {
			// VIGIL_SHUTDOWN_TIMEOUT may be 0 (stop_timeout 1s): stop at once.
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst < 0 || (*d.dst == 0 && d.name != EnvShutdownTimeout) {
				return e, fmt.Errorf("%s=%q: want a positive duration such as 5s", d.name, v)
			}
		}
	}
	ints := []struct {
		name string
		dst  *int
		def  int
	}{
		{EnvConcurrency, &e.Concurrency, 1},
		{EnvJobCrashRetries, &e.JobCrashRetries, 2},
		{EnvMaxConsecutiveFailures, &e.MaxConsecutiveFailures, 0},
	}
	for _, n := range ints {
		*n.dst = n.def
		if v := os.Getenv(n.name); v != "" {
			if *n.dst, err = strconv.Atoi(v); err != nil || *n.dst < 0 {
				return e, fmt.Errorf("%s=%q: want a whole number >= 0", n.name, v)
			}
		}
	}
	if e.RecoverMax < e.RecoverMin {
		return e, fmt.Errorf("%s (%s) must not be below %s (%s)", EnvRecoverMax, e.RecoverMax, EnvRecoverMin, e.RecoverMin)
	}
	if v := os.Getenv(EnvMaxTaskTimeout); v != "" && v != "0" && v != "0s" {
		if e.MaxTaskTimeout, err = time.ParseDuration(v); err != nil || e.MaxTaskTimeout < 0 {
			return e, fmt.Errorf("%s=%q: want a duration >= 0 such as 2h", EnvMaxTaskTimeout, v)
		}
	}
	e.ScratchDir = os.Getenv(EnvScratchDir)
	e.ResultsDir = os.Getenv(EnvResultsDir)
	if v := os.Getenv(EnvKeepScratch); v != "" {
		if e.KeepScratchOnSuccess, err = strconv.ParseBool(v); err != nil {
			return e, fmt.Errorf("%s=%q: want true or false", EnvKeepScratch, v)
		}
	}
	bp := &e.Backpressure
	bp.PauseInterval = BackpressurePauseIntervalDefault
	if v := os.Getenv(EnvBackpressureHighWatermark); v != "" {
		if bp.HighWatermark, err = strconv.Atoi(v); err != nil || bp.HighWatermark < 0 {
			return e, fmt.Errorf("%s=%q: want a whole number >= 0", EnvBackpressureHighWatermark, v)
		}
	}
	if v := os.Getenv(EnvBackpressureLoadThreshold); v != "" {
		if bp.LoadThreshold, err = strconv.ParseFloat(v, 64); err != nil || !(bp.LoadThreshold >= 0) {
			return e, fmt.Errorf("%s=%q: want a number >= 0", EnvBackpressureLoadThreshold, v)
		}
	}
	if v := os.Getenv(EnvBackpressurePauseInterval); v != "" {
		if bp.PauseInterval, err = time.ParseDuration(v); err != nil || bp.PauseInterval <= 0 {
			return e, fmt.Errorf("%s=%q: want a positive duration such as 10s", EnvBackpressurePauseInterval, v)
		}
	}
	return e, nil
}
