package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/redisconn"
)

// Defaults of the worker runtime.
const (
	// BackpressureCheckDefault is how often backpressure looks at the queue
	// depth and the host load.
	BackpressureCheckDefault = time.Second
	// opTimeout bounds each bookkeeping write of the middleware.
	opTimeout = 5 * time.Second
	// shutdownSlack is how long past its shutdown timeout a stopping
	// worker waits for Redis before it closes its client (RunWorker); the
	// rest of a second is for what follows (the process's exit).
	shutdownSlack = 600 * time.Millisecond
)

// WorkerConfig configures RunWorker. Env is what the supervisor handed the
// process (WorkerConfigFromEnv reads it); the other fields are optional.
type WorkerConfig struct {
	Env health.WorkerEnv

	Logger  *slog.Logger
	Clock   clock.Clock // durations, progress throttling, heartbeats, backpressure
	Metrics *Metrics    // nil = DefaultMetrics
	PID     int         // 0 = os.Getpid(); the pid the component record names

	// asynq tuning; zero values take asynq's defaults (1 s, 5 s, and
	// asynq's exponential retry delay).
	TaskCheckInterval        time.Duration // poll interval while the queue is empty
	DelayedTaskCheckInterval time.Duration // scheduled and retry tasks → pending
	RetryDelay               asynq.RetryDelayFunc

	// GroupAggregator turns the tasks enqueued with asynq.Group into one
	// task (asynq's aggregation); nil: tasks of a group stay aggregating.
	// The grace period, max delay and max size are asynq's (zero values:
	// asynq's defaults, 1 m, none, none).
	GroupAggregator  asynq.GroupAggregator
	GroupGracePeriod time.Duration
	GroupMaxDelay    time.Duration
	GroupMaxSize     int

	// Load returns the host load compared with the pool's load threshold;
	// nil = the 1-minute load average divided by the number of CPUs.
	Load              func() (float64, error)
	BackpressureCheck time.Duration // 0 = BackpressureCheckDefault

	// MaxKept bounds the task outcomes kept in memory while Redis does not
	// take them (0 = MaxKeptDefault).
	MaxKept int

	// OutputStore keeps what handlers Publish (nil: an FSStore in the
	// pool's results directory, VIGIL_RESULTS_DIR).
	OutputStore OutputStore
	// Outputs declares, per task type, the outputs a task publishes: a
	// task whose declared outputs were all published by an earlier run is
	// marked done without running (docs/workers.md "Outputs and retries").
	Outputs map[string][]string

	onDequeueSkip func()         // tests: called when backpressure refuses a dequeue
	onDequeue     func(got bool) // tests: called after each dequeue, with whether it got a task
}

// WorkerConfigFromEnv reads the VIGIL_* environment the supervisor gives its
// workers (docs/design.md §4.1).
func WorkerConfigFromEnv() (WorkerConfig, error) {
	env, err := health.LoadWorkerEnv()
	return WorkerConfig{Env: env}, err
}

// worker is one running RunWorker.
type worker struct {
	env         health.WorkerEnv
	id          health.ComponentID
	q           string
	pid         int
	clock       clock.Clock
	log         *slog.Logger
	metrics     *Metrics
	store       *health.Store
	rdb         redis.UniversalClient
	hook        *redisHook
	link        *link
	kept        *keptOutcomes
	throttle    *throttledLog
	handlers    map[string]asynq.Handler
	scratchRoot string
	outputs     OutputStore
	declared    map[string][]string // task type → outputs (WorkerConfig.Outputs)
	batch       *batcher
	avg         durations
	current     currentJobs
	runs        handlerRuns // the handlers running now, for the shutdown's hand-back
	gate        *handlerGate
	recovering  recoveryWindows // tasks that opened a recovering window (Recovering)

	shuttingDown atomic.Bool
	// failuresInRow counts the tasks that failed since the last success;
	// failing closes at Env.MaxConsecutiveFailures (the worker exits).
	failuresInRow atomic.Int64
	failing       chan struct{}
	failingOnce   sync.Once
	// stuck closes at the first stuck handler (stuckGrace): the worker exits.
	stuck     chan struct{}
	stuckOnce sync.Once
	inflight  sync.WaitGroup // middleware runs
}

func newWorker(cfg WorkerConfig, handlers map[string]asynq.Handler) (*worker, error) {
	env := cfg.Env
	if len(handlers) == 0 {
		return nil, errors.New("queue worker: no handlers")
	}
	if err := health.CheckName("queue", env.Component.Queue); err != nil {
		return nil, fmt.Errorf("queue worker: %w", err)
	}
	if env.Concurrency < 1 {
		env.Concurrency = 1
	}
	if env.HeartbeatInterval <= 0 {
		env.HeartbeatInterval = health.HeartbeatIntervalDefault
	}
	if env.HeartbeatTTL <= 0 {
		env.HeartbeatTTL = health.HeartbeatTTLDefault
	}
	if env.ShutdownTimeout <= 0 {
		env.ShutdownTimeout = time.Millisecond // stop at once (asynq reads 0 as 8 s)
	}
	if env.Backpressure.PauseInterval <= 0 {
		env.Backpressure.PauseInterval = health.BackpressurePauseIntervalDefault
	}
	w := &worker{env: env, id: env.Component, q: env.Component.Queue, pid: cfg.PID, clock: cfg.Clock,
		log: cfg.Logger, metrics: cfg.Metrics, handlers: handlers, scratchRoot: env.ScratchDir,
		gate: newHandlerGate(env.Concurrency)}
	w.failing, w.stuck = make(chan struct{}), make(chan struct{})
	if w.pid == 0 {
		w.pid = os.Getpid()
	}
	if w.clock == nil {
		w.clock = clock.Real{}
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With(slog.String("component", w.id.String()))
	if w.metrics == nil {
		w.metrics = DefaultMetrics
	}
	if w.scratchRoot == "" {
		w.scratchRoot = ScratchRootDefault()
	}
	w.outputs, w.declared = cfg.OutputStore, cfg.Outputs
	if w.outputs == nil {
		w.outputs = FSStore{Dir: cmp.Or(env.ResultsDir, filepath.Join(os.TempDir(), "vigil-results"))}
	}
	for typ, names := range w.declared {
		for _, n := range names {
			if err := CheckOutputName(n); err != nil {
				return nil, fmt.Errorf("queue worker: Outputs[%q]: %w", typ, err)
			}
		}
	}
	return w, nil
}

// RunWorker runs the worker of one pool until ctx ends (docs/design.md §4, §6):
// an asynq.Server for the pool's queue with the configured concurrency,
// the heartbeater, and a middleware that records running tasks, durations,
// progress and crash accounting around handlers (task type → handler; a
// type with no handler fails that attempt with NO_HANDLER, and asynq
// retries it per its MaxRetry, as any error).
//
// When ctx ends it stops dequeuing, lets running tasks finish within
// Env.ShutdownTimeout, requeues the others (event aborted:shutdown) and
// returns nil. It returns an error wrapping health.ErrStale, after the same
// shutdown, if the component record names another process: the caller must
// exit.
func RunWorker(ctx context.Context, cfg WorkerConfig, handlers map[string]asynq.Handler) error {
	w, err := newWorker(cfg, handlers)
	if err != nil {
		return err
	}
	// The supervisor reads this process's output through a pipe. When the
	// supervisor dies, the pipe breaks as the parent-death signal asks for
	// a graceful stop, and Go kills a process that writes to a broken
	// stdout or stderr with SIGPIPE unless it listens for the signal: it
	// would die at its first log line, its tasks neither finished nor
	// handed back. Listening makes such writes fail instead (the lines are
	// lost), and the shutdown completes.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	redisconn.SetLogger(w.log) // go-redis's own lines too go through slog
	rdb, err := redisconn.Open(w.env.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	var bound clock.Timer // the shutdown's bound: it covers every deferred step below
	defer func() {
		if bound != nil {
			bound.Stop()
		}
	}()
	w.rdb, w.store = rdb, health.NewStore(rdb, w.env.Prefix, 0)
	w.link, w.throttle = newLink(w.clock), &throttledLog{}
	w.kept = newKeptOutcomes(ownerOf(w.id, w.pid), cfg.MaxKept, w.metrics, w.log, w.clock)
	w.hook = newRedisHook(w.store.Keys(), w.id, w.pid, w.log, w.metrics, w.clock, w.link, w.kept, w.throttle)
	w.hook.onSkip, w.hook.onTry = cfg.onDequeueSkip, cfg.onDequeue
	w.hook.slots = w.env.Concurrency
	w.hook.handBack = w.handBack
	// asynq writes a deadline's or a cancel's outcome without waiting for
	// the middleware, which decides within stuckGrace whether the handler
	// is stuck: wait for that, and a second more.
	w.hook.stuck = func(id string) bool { return w.runs.stuck(id, stuckGrace+time.Second, w.clock) }
	w.hook.records = w.store.GetMany
	w.link.onTrans = w.logLink
	rdb.AddHook(w.hook)
	w.hook.conns.track(rdb) // a cluster's node connections too: the shutdown bound severs them
	// A worker waits for Redis rather than exiting (an exit would count as
	// a crash of a healthy process): it starts with the link down, takes
	// no task, and carries on once Redis answers. A Redis that answers
	// with an error about this client (a wrong password, an ACL) is a
	// configuration error: that one exits.
	if err := redisconn.Ping(ctx, rdb, 5*time.Second); err != nil {
		if faultOf(err) == faultNone {
			return err
		}
		w.link.fire(evNoAnswer, err)
	} else if err := avgScript.Load(ctx, rdb).Err(); err != nil {
		w.log.Warn("load the rolling average script (loaded again on first use)", "err", err)
	}

	hb := &health.Heartbeater{Store: w.store, ID: w.id, PID: w.pid, Host: w.env.Host,
		StartedAt: w.clock.Now(), Interval: w.env.HeartbeatInterval, TTL: w.env.HeartbeatTTL,
		RecoverMin: w.env.RecoverMin, RecoverMax: w.env.RecoverMax, Version: workerVersion(w.env.Version),
		Logger: w.log, Clock: w.clock}
	w.recovering.hb = hb

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              w.env.Concurrency,
		Queues:                   map[string]int{w.q: 1},
		ShutdownTimeout:          w.env.ShutdownTimeout,
		TaskCheckInterval:        cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
		RetryDelayFunc:           cfg.RetryDelay,
		GroupAggregator:          cfg.GroupAggregator,
		GroupGracePeriod:         cfg.GroupGracePeriod,
		GroupMaxDelay:            cfg.GroupMaxDelay,
		GroupMaxSize:             cfg.GroupMaxSize,
		Logger:                   asynqLogger{w.log},
		LogLevel:                 asynq.InfoLevel,
	})

	// The heartbeat and backpressure goroutines outlive the asynq server:
	// a worker finishing its tasks on shutdown is still alive.
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	beatErr := make(chan error, 1)
	wg.Go(func() { beatErr <- hb.Run(bg) })
	rep := w.newReporter(hb)
	wg.Go(func() { rep.run(bg) })
	if bp := w.newBackpressure(cfg); bp != nil {
		next := bp.judge(ctx) // before the first dequeue
		wg.Go(func() { bp.run(bg, next) })
	}
	defer func() {
		stopBG()
		wg.Wait()
	}()

	w.batch = newBatcher(w)
	defer w.batch.close() // after every middleware run has queued its outcome
	linkCtx, stopLink := context.WithCancel(context.Background())
	linkDone := make(chan struct{})
	go func() {
		defer close(linkDone)
		w.watchLink(linkCtx)
	}()
	defer func() {
		stopLink()
		<-linkDone
		w.lastFlush()
	}()
	avgCtx, stopAvg := context.WithCancel(context.Background())
	avgDone := make(chan struct{})
	go func() {
		defer close(avgDone)
		w.averages(avgCtx)
	}()
	defer func() {
		stopAvg()
		<-avgDone
		w.flushAverage() // what the last second gathered
	}()
	// A worker an operator paused takes no task from its first dequeue on
	// (then the reporter reads the pause every heartbeat interval).
	if n, err := rdb.Exists(ctx, w.store.Keys().WorkerPause(w.id)).Result(); err == nil {
		w.setPaused(n > 0)
	}
	if err := srv.Start(asynq.HandlerFunc(w.process)); err != nil {
		return fmt.Errorf("start asynq server for %s: %w", w.id, err)
	}
	w.log.Info("worker running", "queue", w.q, "pid", w.pid, "concurrency", w.env.Concurrency,
		"task_timeout", w.env.TaskTimeout, "asynq", AsynqVersion)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-beatErr:
		w.log.Error("stopping: this process is stale", "err", runErr)
	case <-w.failing:
		runErr = fmt.Errorf("%w: the last %d tasks all failed (max_consecutive_failures)", ErrTooManyFailures, w.env.MaxConsecutiveFailures)
		w.log.Error("stopping: exiting so that the supervisor starts a fresh process (counted as a crash)", "err", runErr)
	case <-w.stuck:
		runErr = fmt.Errorf("%w: only the process's end stops it", ErrStuckHandler)
		w.log.Error("stopping: exiting so that the supervisor starts a fresh process and requeues the stuck task (counted as a crash)", "err", runErr)
	}
	w.shuttingDown.Store(true)
	w.log.Info("worker stopping", "shutdown_timeout", w.env.ShutdownTimeout)
	// The shutdown is bounded whatever Redis does
	// (TestShutdownBoundedWithoutRedis): a Redis that holds its replies
	// (paused) or refuses connections would keep asynq's shutdown writes,
	// the heartbeat and the last flushes waiting for go-redis's timeouts
	// and retries, tens of seconds, and a worker whose supervisor died must
	// be gone within its shutdown timeout + 1 s. Past the shutdown timeout
	// and shutdownSlack the client's connections are severed (sever.go):
	// every call waiting on Redis fails at once, and none dials again. What
	// was not written is not lost: the tasks are still active under this
	// process's owner field, and the supervisor's owner-scoped requeue puts
	// them back once the process is gone.
	bound = w.clock.AfterFunc(w.env.ShutdownTimeout+shutdownSlack, func() {
		w.log.Warn("shutdown outlasts its bound: redis connections severed; what is left unwritten is requeued by the supervisor once this process exits",
			"bound", w.env.ShutdownTimeout+shutdownSlack)
		w.hook.conns.sever()
	})
	srv.Shutdown() // stops dequeuing, waits, requeues what did not finish
	w.giveBackPrefetched()
	w.inflight.Wait() // every middleware run has written its outcome
	select {
	case <-w.stuck:
		if runErr == nil {
			// Stuck as the stop came (or during the shutdown): the
			// process must still exit non-zero, for the supervisor to
			// count the crash against the task it keeps.
			runErr = fmt.Errorf("%w: only the process's end stops it", ErrStuckHandler)
			w.log.Error("stopping with a stuck handler: its task is requeued by the supervisor once this process exits (counted as a crash)", "err", runErr)
		}
	default:
	}
	w.log.Info("worker stopped")
	return runErr
}

// lastFlush writes what the worker still keeps as it stops: outcomes Redis
// did not take. One that cannot be written now is lost with the process:
// its task, still active under this process, is requeued by the
// supervisor once it reaps it, and runs again.
func (w *worker) lastFlush() {
	if w.kept.len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	res, err := w.kept.flush(ctx, w.rdb)
	if err != nil {
		w.log.Error("stopping with task outcomes redis did not take: those tasks will run again", "err", err,
			"written", res.written, "left", res.left)
	}
}

// opCtx is the context of a bookkeeping write: it survives the task's
// cancellation, bounded by opTimeout.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
}

// asynqLogger sends asynq's log lines to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug("asynq: " + fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info("asynq: " + fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn("asynq: " + fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error("asynq: " + fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error("asynq (fatal): " + fmt.Sprint(args...))
	os.Exit(1)
}
