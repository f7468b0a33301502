// Package config reads `vigil serve`'s configuration (docs/design.md §10): a YAML
// file, then VIGIL_* environment variables, then flags, each winning over
// the one before. Unknown fields are errors, and every error names the
// field.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

// The defaults of the settings that the packages they configure also
// default on their own (supervisor, queue, schedule); this package imports
// none of them, and TestSettingsDefaultsMatchPackages in package vigil
// holds each equal to the package's own.
const (
	StopTimeoutDefault             = 10 * time.Second
	ConcurrencyDefault             = 1
	TaskTimeoutDefault             = 30 * time.Minute
	LogTailDefault                 = 256 << 10
	MaxLogLineDefault              = 16 << 10
	DurableTimeoutDefault          = 500 * time.Millisecond
	MisfireGraceDefault            = time.Minute
	MaxCatchUpDefault              = 1000
	SSEMaxClientsPerAddressDefault = 32
)

// RedisEmbedded, as the redis setting, runs an embedded in-memory Redis
// (state lost on exit): what `vigil demo` does, and `vigil serve` only when
// told so.
const RedisEmbedded = "embedded"

// ErrNoRedis: `vigil serve` was given no Redis.
var ErrNoRedis = errors.New("no Redis configured: set --redis, VIGIL_REDIS_URL (or --redis-file, VIGIL_REDIS_FILE) or `redis:` in the config file; `redis: embedded` runs an in-memory Redis whose state is lost on exit")

// Config is the whole configuration file. Each field's doc tag is its
// line in the reference of every setting (docs/config-reference.md, made
// by Reference and held current by TestReferenceIsCurrent) and in the
// flags' help.
type Config struct {
	Redis           string         `yaml:"redis" env:"VIGIL_REDIS_URL,VIGIL_REDIS" doc:"The Redis URL: redis://, rediss:// (TLS), redis-sentinel://, redis-cluster:// (docs/hosts.md), or embedded for an in-memory Redis whose state is lost on exit. vigil serve refuses to start without one. VIGIL_REDIS is an alias of its variable."`
	RedisFile       string         `yaml:"redis_file" doc:"A file holding the Redis URL instead of redis (keeps a password out of the process list and the config file)."`
	DurableEnqueue  DurableEnqueue `yaml:"durable_enqueue" doc:"Enqueues through the API that wait for replicas (Redis with replicas)."`
	Listen          string         `yaml:"listen" doc:"The admin server's address. Loopback by default: set a token before listening beyond this host."`
	Prefix          string         `yaml:"prefix" doc:"The prefix of every key Vigil writes; clusters with different prefixes share a Redis without seeing each other."`
	Host            string         `yaml:"host" doc:"This host's id in the cluster (a-z, 0-9, _ and -); empty: the machine's hostname."`
	Capacity        int            `yaml:"capacity" doc:"The most worker slots this host runs, all pools together; 0: no limit."`
	Lease           Duration       `yaml:"lease" doc:"The lease of a host's slots, its host record and the leadership: a host that stops renewing loses its slots to the others after it."`
	Token           string         `yaml:"token" doc:"The admin bearer token. Empty: mutations are accepted only from this host (loopback peer, loopback Host header, no forwarding header)."`
	TokenFile       string         `yaml:"token_file" doc:"A file holding the token instead of token: out of the process list and of the config file."`
	TrustedProxies  List           `yaml:"trusted_proxies" doc:"The reverse proxies (CIDRs or addresses) whose X-Forwarded-For and X-Forwarded-Proto the admin server believes."`
	CookieSecure    bool           `yaml:"cookie_secure" doc:"Marks the dashboard's session cookie Secure even over plain HTTP (it is Secure over TLS and behind a trusted proxy on https anyway)."`
	AuthReads       bool           `yaml:"auth_reads" doc:"Requires the token on reads too, except /livez, /readyz, the spec, /docs and the dashboard's page shell."`
	ReadOnly        bool           `yaml:"read_only" doc:"Answers 403 to every mutation of the admin API."`
	MaxBody         Size           `yaml:"max_body" doc:"The largest request body the admin API reads."`
	SSE             SSE            `yaml:"sse" doc:"The event stream, GET /api/v1/events (docs/operating.md)."`
	Heartbeat       Heartbeat      `yaml:"heartbeat" doc:"The workers' heartbeats: how a hung worker is told from a busy one."`
	Policy          Policy         `yaml:"policy" doc:"The restart policy after a counted crash (docs/design.md §5)."`
	StopTimeout     Duration       `yaml:"stop_timeout" doc:"How long a worker asked to stop may take before it is killed; it gets this minus 1 s to finish its tasks (VIGIL_SHUTDOWN_TIMEOUT). At least 1s."`
	MaxPoolSize     int            `yaml:"max_pool_size" doc:"The largest size a pool may be given, in the file or through the API."`
	Alerts          Alerts         `yaml:"alerts" doc:"Notifications of failed workers and lost hosts (docs/observability.md)."`
	LogFormat       string         `yaml:"log_format" doc:"text or json."`
	LogLevel        string         `yaml:"log_level" doc:"debug, info, warn or error."`
	InheritEnv      List           `yaml:"inherit_env" doc:"What workers inherit of vigil's environment besides PATH, HOME, LANG, TZ and USER: NAME, or PREFIX* for a prefix."`
	WorkerOutput    WorkerOutput   `yaml:"worker_output" doc:"What this host keeps of its workers' output (stdout and stderr)."`
	JobView         JobView        `yaml:"job_view" doc:"What the API reads and shows of jobs."`
	ScratchMaxAge   Duration       `yaml:"scratch_max_age" doc:"Scratch directories kept after a failure on this host are removed past this age."`
	ScratchMaxBytes Size           `yaml:"scratch_max_bytes" doc:"Past this total, the oldest kept scratch directories of this host are removed; 0: no bound."`
	Pools           []Pool         `yaml:"pools" doc:"The pools of worker processes; sizes are cluster-wide (docs/hosts.md)."`
	Scheduler       Scheduler      `yaml:"scheduler" doc:"The cluster's rules for schedules."`
	Schedules       []Schedule     `yaml:"schedules" doc:"The periodic tasks of this configuration (docs/periodic-tasks.md)."`
}

// DurableEnqueue is queue.DurableConfig as written in the file.
type DurableEnqueue struct {
	Replicas int      `yaml:"replicas" doc:"An enqueue through the API answers 201 only once the job reached this many replicas of its master (docs/hosts.md); 0: off."`
	Timeout  Duration `yaml:"timeout" doc:"How long a durable enqueue waits for its replicas; past it the answer is 503 (the job was written: retried with its task_id, 409 says it was kept)."`
}

// JobView bounds what the API reads and shows of jobs.
type JobView struct {
	PayloadPreview Size `yaml:"payload_preview" doc:"How much of each payload job lists show."`
	MaxPayload     Size `yaml:"max_payload" doc:"How much of the payload a job's detail shows."`
	ReadBudget     Size `yaml:"read_budget" doc:"The bytes of jobs the API loads at once, all requests together."`
}

// WorkerOutput bounds what is kept of the workers' output.
type WorkerOutput struct {
	Tail    Size `yaml:"tail" doc:"The bytes of a worker's latest output lines kept for GET /api/v1/workers/{component}/logs."`
	MaxLine Size `yaml:"max_line" doc:"Longer output lines are cut, with a marker; at most tail."`
}

// SSE configures the event stream.
type SSE struct {
	MaxClients           int      `yaml:"max_clients" doc:"The most event-stream clients of this admin server; beyond: 503."`
	MaxClientsPerAddress int      `yaml:"max_clients_per_address" doc:"The most event-stream clients of one client address (behind a trusted proxy, the forwarded one); beyond: 429."`
	MaxLag               int      `yaml:"max_lag" doc:"How many events a client may fall behind before it is disconnected (it resumes with Last-Event-ID)."`
	KeepAlive            Duration `yaml:"keepalive" doc:"The interval of keep-alive comments on an idle stream."`
}

// Heartbeat configures worker heartbeats.
type Heartbeat struct {
	Interval     Duration `yaml:"interval" doc:"How often each worker writes its heartbeat."`
	TTL          Duration `yaml:"ttl" doc:"A heartbeat's lifetime: a worker whose heartbeat expired is hung, killed and counted as a crash. Greater than interval."`
	StartTimeout Duration `yaml:"start_timeout" doc:"How long a started worker has to write its first heartbeat before it is killed and counted as a crash."`
	RecoverMin   Duration `yaml:"recover_min" doc:"The shortest recovering window a worker may ask for (the heartbeat script's recover_for is raised to it)."`
	RecoverMax   Duration `yaml:"recover_max" doc:"The longest recovering window a worker may ask for (recover_for is cut to it)."`
}

// Policy is policy.Config as written in the file.
type Policy struct {
	BackoffBase     Duration `yaml:"backoff_base" doc:"The first restart delay after a crash; each consecutive crash doubles it."`
	BackoffMax      Duration `yaml:"backoff_max" doc:"The longest restart delay."`
	Jitter          float64  `yaml:"jitter" doc:"A fraction: each delay is multiplied by 1 ± jitter at random; 0: exact delays."`
	Window          Duration `yaml:"window" doc:"The crash window of the rapid limit."`
	MaxInWindow     int      `yaml:"max_in_window" doc:"This many counted crashes within window mark the worker failed."`
	MaxLifetime     int      `yaml:"max_lifetime" doc:"A worker whose lifetime restarts reached this is marked failed at its next crash."`
	StableAfter     Duration `yaml:"stable_after" doc:"A worker healthy this long before a crash starts its backoff over (the lifetime count stays)."`
	JobCrashRetries int      `yaml:"job_crash_retries" doc:"A job that was running in this many worker crashes more is archived as toxic instead of run again; 0: toxic after its first crash."`
}

// Alerts configures notifications.
type Alerts struct {
	Webhook string `yaml:"webhook" doc:"An http(s) URL that gets a POST of the event when a worker turns failed or a host is lost; empty: none."`
}

// MaxRetryDefault is a pool's max_retry when it sets none: two retries,
// three attempts in all.
const MaxRetryDefault = 2

// Pool is one pool.
type Pool struct {
	Queue                  string            `yaml:"queue" doc:"The asynq queue the pool consumes; its name (a-z, 0-9, _ and -) names the pool."`
	Workers                int               `yaml:"workers" doc:"How many worker processes the pool runs, across the whole cluster."`
	Command                []string          `yaml:"command" doc:"The worker's command and arguments, run with no shell."`
	Concurrency            int               `yaml:"concurrency" doc:"How many tasks each worker runs at once (VIGIL_CONCURRENCY)."`
	TaskTimeout            Duration          `yaml:"task_timeout" doc:"The timeout of a task that carries none of its own (asynq's Timeout)."`
	MaxTaskTimeout         Duration          `yaml:"max_task_timeout" doc:"Caps every task's timeout, its own included; 0: no cap."`
	Retention              Duration          `yaml:"retention" doc:"How long asynq keeps a job enqueued through Vigil once it completed (a job's own retention wins); 0: not kept."`
	MaxRetry               *int              `yaml:"max_retry" doc:"The retries for handler errors of a job enqueued through Vigil that sets none (asynq's MaxRetry; a job's own wins)."`
	Env                    map[string]string `yaml:"env" doc:"Variables added to the workers' environment."`
	Backpressure           Backpressure      `yaml:"backpressure" doc:"Host-local backpressure: this host's workers of the pool stop taking tasks while the queue is deep and the host loaded."`
	KeepScratchOnSuccess   bool              `yaml:"keep_scratch_on_success" doc:"Keeps a task's scratch directory after it succeeded too (it is always kept after a failure)."`
	ResultsDir             string            `yaml:"results_dir" doc:"Where the pool's workers publish outputs (queue.Publish); empty: a vigil-results folder in the temp dir."`
	MaxConsecutiveFailures int               `yaml:"max_consecutive_failures" doc:"A worker whose last N tasks all failed exits (a counted crash, then a fresh process); 0: never."`
}

// Backpressure configures a pool's host-local backpressure (0 = off).
type Backpressure struct {
	HighWatermark int      `yaml:"high_watermark" doc:"Backpressure: when the queue holds more pending tasks than this and this host is loaded past load_threshold, this host's workers of the pool stop taking tasks; 0: off."`
	LoadThreshold float64  `yaml:"load_threshold" doc:"The host load (the 1-minute load average per CPU) above which backpressure holds; 0: any load."`
	PauseInterval Duration `yaml:"pause_interval" doc:"How long this host's workers of the pool stop taking tasks before the condition is judged again."`
}

// Default returns the configuration with every default of docs/design.md §10.
func Default() Config {
	return Config{
		Listen:  "127.0.0.1:8080",
		Prefix:  health.PrefixDefault,
		Lease:   Duration(15 * time.Second),
		MaxBody: 1 << 20,
		SSE:     SSE{MaxClients: 10_000, MaxClientsPerAddress: SSEMaxClientsPerAddressDefault, MaxLag: 1000, KeepAlive: Duration(15 * time.Second)},
		Heartbeat: Heartbeat{Interval: Duration(health.HeartbeatIntervalDefault), TTL: Duration(health.HeartbeatTTLDefault), StartTimeout: Duration(health.StartTimeoutDefault),
			RecoverMin: Duration(health.RecoverMinDefault), RecoverMax: Duration(health.RecoverMaxDefault)},
		StopTimeout:     Duration(StopTimeoutDefault),
		MaxPoolSize:     1000,
		LogFormat:       "text",
		LogLevel:        "info",
		WorkerOutput:    WorkerOutput{Tail: LogTailDefault, MaxLine: MaxLogLineDefault},
		JobView:         JobView{PayloadPreview: 1 << 10, MaxPayload: 1 << 20, ReadBudget: 16 << 20},
		ScratchMaxAge:   Duration(7 * 24 * time.Hour),
		ScratchMaxBytes: 10 << 30,
		DurableEnqueue:  DurableEnqueue{Timeout: Duration(DurableTimeoutDefault)},
		Scheduler:       Scheduler{MisfireGrace: Duration(MisfireGraceDefault), MaxCatchUp: MaxCatchUpDefault},
		Policy: Policy{
			BackoffBase: Duration(policy.BackoffBaseDefault), BackoffMax: Duration(policy.BackoffMaxDefault),
			Window: Duration(policy.WindowDefault), MaxInWindow: policy.MaxInWindowDefault,
			MaxLifetime: policy.MaxLifetimeDefault, StableAfter: Duration(policy.StableAfterDefault),
			JobCrashRetries: policy.JobCrashRetriesDefault,
		},
	}
}

// Parse reads a YAML document over the defaults. Unknown fields are errors.
func Parse(data []byte) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("config: %s", describe(data, err))
	}
	c.PoolDefaults()
	return c, nil
}

// PoolDefaults fills in the zero fields of every pool that have a default
// (concurrency, task_timeout, backpressure.pause_interval), as for a pool
// read from a file; a program that builds its pools in Go calls it too.
func (c *Config) PoolDefaults() {
	c.Pools = slices.Clone(c.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Concurrency == 0 {
			p.Concurrency = ConcurrencyDefault
		}
		if p.MaxRetry == nil {
			p.MaxRetry = new(MaxRetryDefault)
		}
		if p.TaskTimeout == 0 {
			p.TaskTimeout = Duration(TaskTimeoutDefault)
		}
		if p.Backpressure.PauseInterval == 0 {
			p.Backpressure.PauseInterval = Duration(10 * time.Second)
		}
	}
}

// Load reads the file at path ("" = defaults only).
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(data)
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	if c.Host != "" {
		if err := health.CheckName("host", c.Host); err != nil {
			return err
		}
	}
	hb := c.Heartbeat
	switch {
	case hb.Interval <= 0:
		return errors.New("heartbeat.interval must be > 0")
	case hb.TTL <= 0:
		return errors.New("heartbeat.ttl must be > 0")
	case hb.TTL <= hb.Interval:
		return fmt.Errorf("heartbeat.ttl (%s) must be greater than heartbeat.interval (%s)", hb.TTL, hb.Interval)
	case hb.StartTimeout <= 0:
		return errors.New("heartbeat.start_timeout must be > 0")
	case hb.RecoverMin < 0 || hb.RecoverMax < 0:
		return errors.New("heartbeat.recover_min and recover_max must be >= 0 (0: 5s and 2m)")
	case cmp.Or(hb.RecoverMax, Duration(health.RecoverMaxDefault)) < cmp.Or(hb.RecoverMin, Duration(health.RecoverMinDefault)):
		return fmt.Errorf("heartbeat.recover_max (%s) must be at least heartbeat.recover_min (%s)", hb.RecoverMax, hb.RecoverMin)
	case time.Duration(c.StopTimeout) < time.Second:
		return fmt.Errorf("stop_timeout must be at least 1s, got %s", c.StopTimeout)
	case c.Lease <= 0:
		return errors.New("lease must be > 0")
	case c.Capacity < 0:
		return errors.New("capacity must be >= 0")
	case c.MaxBody <= 0:
		return errors.New("max_body must be > 0")
	case c.MaxPoolSize < 1:
		return errors.New("max_pool_size must be >= 1")
	case c.ScratchMaxAge <= 0 || c.ScratchMaxBytes < 0:
		return fmt.Errorf("scratch_max_age must be > 0 and scratch_max_bytes >= 0, got %s and %d", c.ScratchMaxAge, c.ScratchMaxBytes)
	case c.DurableEnqueue.Replicas < 0 || c.DurableEnqueue.Timeout <= 0:
		return fmt.Errorf("durable_enqueue: want replicas >= 0 and timeout > 0, got %d and %s", c.DurableEnqueue.Replicas, c.DurableEnqueue.Timeout)
	case c.SSE.MaxClients < 1 || c.SSE.MaxClientsPerAddress < 1 || c.SSE.MaxLag < 1 || c.SSE.KeepAlive <= 0:
		return errors.New("sse.max_clients, sse.max_clients_per_address, sse.max_lag and sse.keepalive must be > 0")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("log_format must be text or json, got %q", c.LogFormat)
	case !validLevel(c.LogLevel):
		return fmt.Errorf("log_level must be debug, info, warn or error, got %q", c.LogLevel)
	case c.WorkerOutput.Tail < 1 || c.WorkerOutput.MaxLine < 1 || c.WorkerOutput.MaxLine > c.WorkerOutput.Tail:
		return fmt.Errorf("worker_output: tail and max_line must be > 0 and max_line <= tail, got %d and %d", c.WorkerOutput.Tail, c.WorkerOutput.MaxLine)
	case c.JobView.PayloadPreview < 1 || c.JobView.MaxPayload < c.JobView.PayloadPreview || c.JobView.ReadBudget < c.JobView.MaxPayload:
		return fmt.Errorf("job_view: want 0 < payload_preview <= max_payload <= read_budget, got %d, %d, %d", c.JobView.PayloadPreview, c.JobView.MaxPayload, c.JobView.ReadBudget)
	case c.Alerts.Webhook != "" && !validWebhook(c.Alerts.Webhook):
		return fmt.Errorf("alerts.webhook must be an http:// or https:// URL, got %q", c.Alerts.Webhook)
	}
	if err := c.PolicyConfig().Validate(); err != nil {
		return err
	}
	if _, err := c.TrustedProxyPrefixes(); err != nil {
		return err
	}
	for _, n := range c.InheritEnv {
		if name := strings.TrimSuffix(n, "*"); name == "" || strings.ContainsAny(name, "=* \x00") {
			return fmt.Errorf("inherit_env: %q is no variable name (NAME, or PREFIX* for a prefix)", n)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		if err := health.CheckName(f+".queue", p.Queue); err != nil {
			return err
		}
		switch {
		case seen[p.Queue]:
			return fmt.Errorf("%s.queue: duplicate queue %q", f, p.Queue)
		case len(p.Command) == 0 || p.Command[0] == "":
			return fmt.Errorf("%s.command: empty command for queue %q", f, p.Queue)
		case p.Workers < 0 || p.Workers > c.MaxPoolSize:
			return fmt.Errorf("%s.workers must be from 0 to max_pool_size (%d), got %d", f, c.MaxPoolSize, p.Workers)
		case p.Concurrency < 1:
			return fmt.Errorf("%s.concurrency must be >= 1", f)
		case p.TaskTimeout <= 0:
			return fmt.Errorf("%s.task_timeout must be > 0", f)
		case p.MaxTaskTimeout < 0 || p.Retention < 0:
			return fmt.Errorf("%s: max_task_timeout and retention must be >= 0", f)
		case p.Backpressure.HighWatermark < 0 || p.Backpressure.LoadThreshold < 0 || p.Backpressure.PauseInterval <= 0:
			return fmt.Errorf("%s.backpressure: values must be >= 0 and pause_interval > 0", f)
		case p.MaxConsecutiveFailures < 0:
			return fmt.Errorf("%s.max_consecutive_failures must be >= 0", f)
		case p.MaxRetry != nil && (*p.MaxRetry < 0 || *p.MaxRetry > 1000):
			return fmt.Errorf("%s.max_retry must be 0 to 1000, got %d", f, *p.MaxRetry)
		}
		seen[p.Queue] = true
	}
	return c.validateScheduler()
}

func validLevel(s string) bool {
	var l slog.Level
	return l.UnmarshalText([]byte(s)) == nil
}

func validWebhook(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// TrustedProxyPrefixes parses trusted_proxies (a bare address is a /32 or
// /128).
func (c Config) TrustedProxyPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted_proxies: %q is no CIDR (e.g. 10.0.0.0/8) nor address", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ListenHosts is the host part of listen, unless it is a wildcard
// address: the name clients use for this server (server.Config.ListenHosts).
func (c Config) ListenHosts() []string {
	h, _, err := net.SplitHostPort(c.Listen)
	if err != nil || h == "" {
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.IsUnspecified() {
		return nil
	}
	return []string{h}
}

// PolicyConfig converts the policy section.
func (c Config) PolicyConfig() policy.Config {
	p := c.Policy
	return policy.Config{
		BackoffBase: time.Duration(p.BackoffBase), BackoffMax: time.Duration(p.BackoffMax), Jitter: p.Jitter,
		Window: time.Duration(p.Window), MaxInWindow: p.MaxInWindow, MaxLifetime: p.MaxLifetime,
		StableAfter: time.Duration(p.StableAfter), JobCrashRetries: new(p.JobCrashRetries),
	}
}

// describe turns a YAML error into one line that names the field.
func describe(data []byte, err error) string {
	var pe *posError
	if errors.As(err, &pe) {
		var doc yaml.Node
		where := map[[2]int]string{}
		if yaml.Unmarshal(data, &doc) == nil {
			paths(&doc, where)
		}
		if p, ok := where[[2]int{pe.line, pe.col}]; ok {
			return fmt.Sprintf("%s: %v (line %d)", p, pe.err, pe.line)
		}
		return pe.Error()
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var doc yaml.Node
		_ = yaml.Unmarshal(data, &doc)
		out := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			out[i] = nameTypeError(&doc, e)
		}
		return strings.Join(out, "; ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// typeErrorRE reads yaml.v3's "line 3: cannot unmarshal !!str `many` into
// int".
var typeErrorRE = regexp.MustCompile("^line ([0-9]+): (cannot unmarshal !![a-z]+ `(.*)` into .*)$")

// nameTypeError puts the field's path before a type error, found by the
// line and the value it names: "pools[0].workers: cannot unmarshal …
// (line 3)". An error it cannot place stays as it is.
func nameTypeError(doc *yaml.Node, e string) string {
	m := typeErrorRE.FindStringSubmatch(e)
	if m == nil {
		return e
	}
	line, _ := strconv.Atoi(m[1])
	if p := scalarPath(doc, line, m[3]); p != "" {
		return fmt.Sprintf("%s: %s (line %d)", p, m[2], line)
	}
	return e
}

// scalarPath is the field path of the first scalar on line whose value is
// value, or "".
func scalarPath(doc *yaml.Node, line int, value string) (path string) {
	walkValues(doc, "", func(p string, v *yaml.Node) {
		if path == "" && v.Kind == yaml.ScalarNode && v.Line == line && v.Value == value {
			path = p
		}
	})
	return path
}
