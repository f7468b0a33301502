package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/hibiken/asynq"
	"golang.org/x/sync/semaphore"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/metrics"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/web"
)

// Defaults of Config.
const (
	MaxBodyDefault    = 1 << 20 // 1 MiB (docs/design.md §7)
	SessionTTLDefault = 12 * time.Hour
	// ReadyTimeout bounds the Redis ping of /readyz and /api/v1/health.
	ReadyTimeout = time.Second
	// BodyReadTimeout bounds reading one request body.
	BodyReadTimeout = 30 * time.Second
	// PayloadPreviewDefault is how much of a job's payload a job list shows.
	PayloadPreviewDefault = 1 << 10
	// MaxPayloadShownDefault is how much of a job's payload its detail
	// shows.
	MaxPayloadShownDefault = 1 << 20
	// ReadBudgetDefault bounds the bytes of jobs all requests together load
	// from Redis at once.
	ReadBudgetDefault = 16 << 20
)

// Supervisor is what the server needs of supervisor.Supervisor: the
// operator actions on this host's components and their output.
type Supervisor interface {
	Restart(ctx context.Context, id health.ComponentID) (health.Component, error)
	StopComponent(ctx context.Context, id health.ComponentID) (health.Component, error)
	Reset(ctx context.Context, id health.ComponentID, restart bool) (health.Component, error)
	// Remove deletes a stopped component beyond its pool's size for good.
	Remove(ctx context.Context, id health.ComponentID) error
	Logs(id health.ComponentID) []string
}

// Config configures the admin server.
type Config struct {
	// Store is the health store; its Redis also holds asynq's queues.
	Store *health.Store
	// Supervisor acts on this host's workers; nil: worker actions answer 404.
	Supervisor Supervisor
	// Cluster runs cluster-wide actions (rolling restarts); nil: they
	// answer 503.
	Cluster Cluster
	// MaxPoolSize bounds pool sizes set through the API (default 1000).
	MaxPoolSize int
	// Queue is the pause control; nil: queue.NewControl(Store).
	Queue *queue.Control
	// Queues are the configured pools' queues; other queues answer 404.
	Queues []string

	// Token is the bearer token ("" = none: mutations only from this host,
	// see docs/design.md §7).
	Token     string
	AuthReads bool
	ReadOnly  bool
	// ListenHosts are the host names (or addresses) this server is reached
	// by besides loopback addresses and localhost, e.g. the listen
	// address's host: without a token, a mutation's Host header must name
	// one of these.
	ListenHosts []string
	// TrustedProxies are the reverse proxies (CIDRs) whose X-Forwarded-For
	// and X-Forwarded-Proto are believed; from any other peer they are
	// ignored.
	TrustedProxies []netip.Prefix
	// CookieSecure marks the session cookie Secure always (it is anyway
	// over TLS, or behind a trusted proxy that says https).
	CookieSecure bool
	// MaxBody caps request bodies (bytes, default MaxBodyDefault).
	MaxBody int64
	// MaxPayload caps an enqueued job's payload (bytes, default
	// queue.MaxPayloadDefault; the body cap applies too).
	MaxPayload int
	// DurableEnqueue, with Replicas > 0, makes an enqueue answer 201 only
	// once the job reached that many replicas; else 503 with Retry-After.
	DurableEnqueue queue.DurableConfig
	// PayloadPreview is how many bytes of a job's payload a job list shows
	// (the rest: payload_truncated, payload_size); MaxPayloadShown the same
	// for a job's detail (defaults PayloadPreviewDefault,
	// MaxPayloadShownDefault).
	PayloadPreview  int
	MaxPayloadShown int
	// ReadBudget bounds the bytes of jobs that all requests together load
	// from Redis at once (ReadBudgetDefault): a request past it waits.
	ReadBudget int64
	// TaskTimeouts are the pools' task timeouts, given to jobs enqueued
	// without one.
	TaskTimeouts map[string]time.Duration
	// MaxTaskTimeouts are the pools' max_task_timeout (absent: no cap),
	// for the effective timeout a job's detail shows.
	MaxTaskTimeouts map[string]time.Duration
	// Retentions are the pools' retention, given to jobs enqueued through
	// the API without one (asynq's Retention: how long a completed job
	// answers).
	Retentions map[string]time.Duration
	// MaxRetries are the pools' max_retry, given to jobs enqueued through
	// the API without one.
	MaxRetries map[string]int
	// SessionTTL is the dashboard cookie's lifetime (default
	// SessionTTLDefault).
	SessionTTL time.Duration
	// BasePath is the path prefix the host program mounts the handler under
	// (with http.StripPrefix), e.g. "/admin"; it goes into the served spec's
	// servers and the session cookie's path. "" = the root.
	BasePath string
	// Version is the API version in the spec (default "1.0.0").
	Version string
	// SSE configures GET /api/v1/events (zero fields: the defaults).
	SSE SSEConfig

	// Metrics, if set, is served at GET /metrics.
	Metrics *metrics.Metrics
	// Schedules reads and changes the periodic tasks (package schedule);
	// nil: a store on Store for the configured Queues, with the default
	// settings. Firing them is the leader's Scheduler's job, not the
	// server's.
	Schedules *schedule.Store

	Logger *slog.Logger
	Clock  clock.Clock
}

func (c Config) withDefaults() Config {
	c.MaxBody = cmp.Or(c.MaxBody, MaxBodyDefault)
	c.SessionTTL = cmp.Or(c.SessionTTL, SessionTTLDefault)
	c.Version = cmp.Or(c.Version, APIVersion)
	c.MaxPoolSize = cmp.Or(c.MaxPoolSize, 1000)
	c.PayloadPreview = cmp.Or(c.PayloadPreview, PayloadPreviewDefault)
	c.MaxPayloadShown = cmp.Or(c.MaxPayloadShown, MaxPayloadShownDefault)
	c.ReadBudget = cmp.Or(c.ReadBudget, ReadBudgetDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Queue == nil && c.Store != nil {
		c.Queue = queue.NewControl(c.Store)
	}
	c.Queues = slices.Clone(c.Queues)
	slices.Sort(c.Queues)
	c.Queues = slices.Compact(c.Queues)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("server: Config.Store is required")
	case c.MaxBody < 0 || c.MaxPayload < 0 || c.SessionTTL < 0:
		return errors.New("server: MaxBody, MaxPayload and SessionTTL must be >= 0")
	case c.PayloadPreview < 0 || c.MaxPayloadShown < c.PayloadPreview || c.ReadBudget < int64(c.MaxPayloadShown):
		return errors.New("server: want 0 <= PayloadPreview <= MaxPayloadShown <= ReadBudget")
	case c.BasePath != "" && (c.BasePath[0] != '/' || c.BasePath[len(c.BasePath)-1] == '/'):
		return fmt.Errorf("server: BasePath %q must start with / and not end with one", c.BasePath)
	}
	for _, q := range c.Queues {
		if err := health.CheckName("queue", q); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	return nil
}

// Server is the admin server: an http.Handler, with the event broker of
// GET /api/v1/events behind it. Close it when done: event streams never
// end by themselves, so close it before http.Server.Shutdown.
type Server struct {
	handler http.Handler
	events  *server
	broker  *broker
	once    sync.Once
}

// ServeHTTP serves the admin API, the docs and the dashboard. It takes GET
// /api/v1/events itself, before the mux and Huma (openEvents). Over
// HTTP/1.1 the stream's connection is taken from net/http and served on a
// goroutine of the broker's (hijack), and ServeHTTP returns at once; else
// the stream is served here, and ServeHTTP stays small: while the stream
// lasts its frame lies on the connection goroutine's stack under
// r3labs/sse's loop, as the stack's average depth decides the size new
// goroutines start with (runtime: adaptive initial stacks), so that a
// deeper one costs every goroutine of every client.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != eventsPath || r.Method != http.MethodGet {
		s.handler.ServeHTTP(w, r)
		return
	}
	c := s.events.openEvents(w, r)
	if c == nil {
		return
	}
	s.broker.stream(c)
}

// Close disconnects every event client (they reconnect elsewhere, or here
// later, with Last-Event-ID), waits for their handlers and stops the
// broker's goroutines. Later event requests answer 503. Safe twice.
func (s *Server) Close() error {
	s.once.Do(s.broker.close)
	return nil
}

// New returns the admin server, its event broker running. Mount it at the
// root, or under a prefix with http.StripPrefix (and Config.BasePath set to
// that prefix).
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &server{
		cfg:    cfg,
		store:  cfg.Store,
		log:    cfg.Logger,
		logins: newLoginGuard(cfg.Logger),
		reads:  semaphore.NewWeighted(cfg.ReadBudget),
		insp:   asynq.NewInspectorFromRedisClient(cfg.Store.Client()),
		jobs: queue.NewClient(cfg.Store, queue.ClientConfig{Queues: cfg.Queues, MaxPayload: cfg.MaxPayload,
			TaskTimeouts: cfg.TaskTimeouts, Retentions: cfg.Retentions, MaxRetries: cfg.MaxRetries, Logger: cfg.Logger, Clock: cfg.Clock, Durable: cfg.DurableEnqueue}),
		schedules: cfg.Schedules,
	}
	if s.schedules == nil {
		s.schedules = schedule.NewStore(cfg.Store, schedule.StoreConfig{Queues: cfg.Queues, MaxPayload: cfg.MaxPayload,
			TaskTimeouts: cfg.TaskTimeouts, Clock: cfg.Clock, Logger: cfg.Logger})
	}
	hw := newHealthWatcher(s)
	s.broker = newBroker(cfg.SSE, cfg.Store, cfg.Logger, cfg.Clock, s.snapshot, hw.notify)
	s.broker.metrics = cfg.Metrics
	mux := http.NewServeMux()
	api := newAPI(mux, cfg)
	api.UseMiddleware(s.authMiddleware(api))
	s.register(api)
	mux.Handle("GET /docs", web.Docs())
	mux.Handle("GET /docs/{file}", web.Docs())
	mux.Handle("GET /{$}", web.Home())
	mux.Handle("GET /dashboard/{file}", web.Dashboard())
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.metricsHandler())
	}
	s.broker.start(hw.run)
	return &Server{handler: s.wrap(mux), events: s, broker: s.broker}, nil
}

// server holds the handlers' dependencies.
type server struct {
	cfg   Config
	store *health.Store
	log   *slog.Logger
	insp  *asynq.Inspector
	jobs  *queue.Client
	// broker serves GET /api/v1/events (nil in Spec).
	broker *broker
	// logins throttles and logs wrong tokens.
	logins *loginGuard
	// reads is the ReadBudget of job reads.
	reads *semaphore.Weighted
	// schedules are the periodic tasks.
	schedules *schedule.Store
}

// Spec returns the OpenAPI document of the API as New serves it at the
// root (BasePath "").
func Spec() *huma.OpenAPI {
	api := newAPI(http.NewServeMux(), Config{Version: APIVersion})
	(&server{}).register(api)
	return api.OpenAPI()
}

// newAPI makes the Huma API on mux: Huma's own docs page (CDN assets) and
// schema routes are off; the spec is served at /openapi.{json,yaml} and
// /openapi-3.0.{json,yaml}.
func newAPI(mux *http.ServeMux, cfg Config) huma.API {
	hc := huma.DefaultConfig("Vigil admin API", cmp.Or(cfg.Version, APIVersion))
	hc.DocsPath = ""
	hc.SchemasPath = ""
	hc.CreateHooks = nil // no $schema links in bodies
	hc.Info.Description = apiDescription
	hc.Info.License = &huma.License{Name: "MIT", URL: "https://opensource.org/licenses/MIT"}
	hc.Servers = []*huma.Server{{URL: cfg.BasePath + "/", Description: "this admin server"}}
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		schemeBearer: {Type: "http", Scheme: "bearer", Description: "The admin token (`token` / `VIGIL_TOKEN`)."},
	}
	hc.Tags = tags
	return humago.New(mux, hc)
}
