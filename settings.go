package vigil

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/supervisor"
)

// Settings is the whole configuration file (docs/configuration.md). Start
// from DefaultSettings, ParseSettings or LoadSettings.
type Settings = config.Config

// The parts of Settings, for composite literals.
type (
	Pool         = config.Pool
	Backpressure = config.Backpressure
	Heartbeat    = config.Heartbeat
	Policy       = config.Policy
	SSE          = config.SSE
	JobView      = config.JobView
	WorkerOutput = config.WorkerOutput
	Alerts       = config.Alerts
	Scheduler    = config.Scheduler
	Schedule     = config.Schedule
	// Duration is a time.Duration written "15s" in YAML.
	Duration = config.Duration
	// Size is a byte count written "256KiB" in YAML.
	Size = config.Size
)

// DefaultSettings returns every default of the configuration file.
func DefaultSettings() Settings { return config.Default() }

// ParseSettings reads a YAML document over the defaults; unknown fields
// are errors. It neither reads the environment nor checks the values: see
// LoadSettings and ValidateSettings.
func ParseSettings(yaml []byte) (Settings, error) { return config.Parse(yaml) }

// LoadSettings reads the YAML file at path ("" = the defaults), then the
// VIGIL_* environment variables and the secret files (token_file,
// redis_file), and checks the result, as `vigil serve` does.
func LoadSettings(path string) (Settings, error) {
	s, err := config.Load(path)
	if err != nil {
		return s, err
	}
	if err := s.ApplyEnv(os.LookupEnv); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	if err := s.ReadSecretFiles(); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	if err := ValidateSettings(s); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	return s, nil
}

// ValidateSettings reports the first invalid setting by its name (and,
// for a schedule read from a file, its line): the file's own checks, then
// each schedule's spec, queue and payload as the scheduler judges them.
func ValidateSettings(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return validateSchedules(s, time.Now())
}

// OpenRedis opens a client for a Redis URL as Vigil reads it: redis://,
// rediss:// (TLS), redis-sentinel:// and redis-cluster://
// (docs/hosts.md).
func OpenRedis(url string) (redis.UniversalClient, error) { return redisconn.Open(url) }

// validateSchedules checks every schedule against the pools' queues; an
// error names the field and its line.
func validateSchedules(s Settings, now time.Time) error {
	queues := make([]string, len(s.Pools))
	for i, p := range s.Pools {
		queues[i] = p.Queue
	}
	rules := schedule.Rules{Queues: queues, MaxPayload: schedule.MaxPayloadDefault, AllowSubsecond: s.Scheduler.AllowSubsecond, Now: now}
	for i, e := range s.Schedules {
		d := scheduleDefinition(e)
		if err := d.Check(rules); err != nil {
			var fe *schedule.FieldError
			if errors.As(err, &fe) {
				return fmt.Errorf("schedules[%d].%s: %v%s", i, fe.Field, fe.Err, s.At(i, fe.Field))
			}
			return fmt.Errorf("schedules[%d]: %v%s", i, err, s.At(i, ""))
		}
	}
	return nil
}

// supervisorPools converts the pools. The worker runtime's per-pool
// settings (backpressure, keep_scratch_on_success, …) reach the workers as
// VIGIL_* variables of the pool's environment, where
// health.LoadWorkerEnv reads them back.
func supervisorPools(s Settings) []supervisor.Pool {
	out := make([]supervisor.Pool, len(s.Pools))
	for i, p := range s.Pools {
		env := make(map[string]string, len(p.Env)+4)
		maps.Copy(env, p.Env)
		env[health.EnvKeepScratch] = strconv.FormatBool(p.KeepScratchOnSuccess)
		env[health.EnvBackpressureHighWatermark] = strconv.Itoa(p.Backpressure.HighWatermark)
		env[health.EnvBackpressureLoadThreshold] = strconv.FormatFloat(p.Backpressure.LoadThreshold, 'g', -1, 64)
		if p.Backpressure.PauseInterval > 0 {
			env[health.EnvBackpressurePauseInterval] = p.Backpressure.PauseInterval.String()
		}
		if p.MaxConsecutiveFailures > 0 {
			env[health.EnvMaxConsecutiveFailures] = strconv.Itoa(p.MaxConsecutiveFailures)
		}
		if p.MaxTaskTimeout > 0 {
			env[health.EnvMaxTaskTimeout] = p.MaxTaskTimeout.String()
		}
		if p.ResultsDir != "" { // where queue.Publish writes
			env[health.EnvResultsDir] = p.ResultsDir
		}
		out[i] = supervisor.Pool{Queue: p.Queue, Workers: p.Workers, Command: p.Command,
			Concurrency: p.Concurrency, TaskTimeout: time.Duration(p.TaskTimeout), Env: env}
	}
	return out
}

// heartbeatConfig converts the heartbeat section.
func heartbeatConfig(s Settings) supervisor.Heartbeat {
	hb := s.Heartbeat
	return supervisor.Heartbeat{Interval: time.Duration(hb.Interval), TTL: time.Duration(hb.TTL),
		StartTimeout: time.Duration(hb.StartTimeout), RecoverMin: time.Duration(hb.RecoverMin),
		RecoverMax: time.Duration(hb.RecoverMax)}
}

// scratchRoots are the scratch roots of this host's pools, each with its
// queues (a pool's VIGIL_SCRATCH_DIR, else def), and each queue's longest
// run (its task timeout and a minute).
func scratchRoots(s Settings, def string) (roots map[string][]string, minAge map[string]time.Duration) {
	roots, minAge = map[string][]string{}, map[string]time.Duration{}
	for _, p := range s.Pools {
		root := p.Env[health.EnvScratchDir]
		if root == "" {
			root = def
		}
		roots[root] = append(roots[root], p.Queue)
		minAge[p.Queue] = time.Duration(p.TaskTimeout) + time.Minute
	}
	return roots, minAge
}

// scheduleDefinition converts one entry of schedules.
func scheduleDefinition(e Schedule) schedule.Definition {
	return schedule.Definition{Name: e.Name, Spec: e.Spec, Queue: e.Queue, Type: e.Type, Payload: []byte(e.Payload),
		MaxRetry: e.MaxRetry, Timeout: time.Duration(e.Timeout), Retention: time.Duration(e.Retention),
		Unique: time.Duration(e.Unique), CatchUp: schedule.CatchUp(e.CatchUp), Source: schedule.SourceConfig}
}

// scheduleDefinitions converts the schedules.
func scheduleDefinitions(s Settings) []schedule.Definition {
	out := make([]schedule.Definition, len(s.Schedules))
	for i, e := range s.Schedules {
		out[i] = scheduleDefinition(e)
	}
	return out
}

// schedulerSettings converts the scheduler section.
func schedulerSettings(s Settings) schedule.Settings {
	return schedule.Settings{AllowSubsecond: s.Scheduler.AllowSubsecond, MisfireGrace: time.Duration(s.Scheduler.MisfireGrace),
		MaxCatchUp: s.Scheduler.MaxCatchUp}
}
