package health

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Environment handed to every worker (DESIGN.md §4.1).
const (
	EnvRedisURL          = "VIGIL_REDIS_URL"
	EnvPrefix            = "VIGIL_PREFIX"
	EnvComponent         = "VIGIL_COMPONENT"
	EnvQueue             = "VIGIL_QUEUE"
	EnvSlot              = "VIGIL_SLOT"
	EnvHost              = "VIGIL_HOST"
	EnvConcurrency       = "VIGIL_CONCURRENCY"
	EnvTaskTimeout       = "VIGIL_TASK_TIMEOUT"
	EnvHeartbeatInterval = "VIGIL_HEARTBEAT_INTERVAL"
	EnvHeartbeatTTL      = "VIGIL_HEARTBEAT_TTL"
	EnvShutdownTimeout   = "VIGIL_SHUTDOWN_TIMEOUT"
	EnvJobCrashRetries   = "VIGIL_JOB_CRASH_RETRIES"
)

// WorkerEnv is what a worker learns from its environment.
type WorkerEnv struct {
	RedisURL          string
	Prefix            string
	Component         ComponentID
	Host              string
	Concurrency       int
	TaskTimeout       time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTTL      time.Duration
	ShutdownTimeout   time.Duration
	JobCrashRetries   int
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
	durs := []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{
		{EnvTaskTimeout, &e.TaskTimeout, 30 * time.Minute},
		{EnvHeartbeatInterval, &e.HeartbeatInterval, HeartbeatIntervalDefault},
		{EnvHeartbeatTTL, &e.HeartbeatTTL, HeartbeatTTLDefault},
		{EnvShutdownTimeout, &e.ShutdownTimeout, 9 * time.Second},
	}
	for _, d := range durs {
		*d.dst = d.def
		if v := os.Getenv(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
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
	}
	for _, n := range ints {
		*n.dst = n.def
		if v := os.Getenv(n.name); v != "" {
			if *n.dst, err = strconv.Atoi(v); err != nil || *n.dst < 0 {
				return e, fmt.Errorf("%s=%q: want a whole number >= 0", n.name, v)
			}
		}
	}
	return e, nil
}
