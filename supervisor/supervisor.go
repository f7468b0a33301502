package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// Errors of operator actions.
var (
	// ErrUnknownComponent: no pool of this host has that component.
	ErrUnknownComponent = errors.New("unknown component")
	// ErrStopped: the supervisor is not running.
	ErrStopped = errors.New("supervisor not running")
)

// Supervisor runs this host's pools. Create it with New, then Start and
// Stop it (or Run it).
type Supervisor struct {
	cfg     Config
	store   *health.Store
	log     *slog.Logger
	spawner *spawner
	logs    logTail

	exits    chan exitMsg
	timers   chan timerMsg
	cmds     chan func()
	ticks    chan struct{}
	pulses   chan struct{}
	gone     chan goneMsg
	up       chan struct{}
	quit     chan struct{} // closed by Stop once drained: the monitor returns
	stopCmds chan struct{} // closed by Stop: no more commands from other hosts
	// leaving ends once Stop begins: a cluster tick waiting on Redis then
	// gives up (see tick), so that the shutdown does not wait behind it.
	leaving context.Context
	leave   context.CancelFunc
	// over ends with dead: the probe of an unreachable Redis gives up then.
	over context.Context
	end  context.CancelFunc
	dead chan struct{} // closed when the monitor has returned

	wg     sync.WaitGroup // goroutines of processes and probes
	groups groups         // process groups of the live children, for Stop's last resort
	// illegal counts worker moves the state table does not allow (a bug:
	// tests fail on any).
	illegal atomic.Int64
	// scans counts the claim steps that read every lease (needScan).
	scans atomic.Int64

	mu       sync.Mutex // guards started, stopping
	started  bool
	stopping bool
	done     chan struct{} // closed when Stop has finished

	// Owned by the monitor goroutine.
	workers      map[health.ComponentID]*worker
	seq          uint64
	redis        availability // whether Redis answers, and since when
	infoRefused  bool         // Redis would not say when it started (restartUnseen): warned once
	infoDropped  bool         // INFO server failed without a reply while its server answered PING (restartUnseen): warned once
	stopPulse    func() bool  // stops the pulse timer
	shuttingDown bool
	deferred     []func()  // run once the current message is handled
	recoverLater []deadPID // recoveries made once Redis answers again
	// earlier: the live worker processes of this host's earlier instances
	// found on this machine as it joined (earlierWorkers), by slot.
	earlier map[health.ComponentID]int
	drained chan struct{} // closed once shutting down and no process left
	cluster clusterState
}

// New checks cfg and returns a supervisor that keeps its state in store.
func New(cfg Config, store *health.Store) (*Supervisor, error) {
	cfg = cfg.withDefaults()
	if cfg.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("host id: %w", err)
		}
		cfg.Host = h
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !honoursDeadlines(store.Client()) {
		cfg.Logger.Warn("the Redis client does not honour its calls' deadlines (go-redis ContextTimeoutEnabled is off): " +
			"a call whose reply does not come waits for the client's read timeout, not op_timeout; " +
			"open it with Vigil's Redis URL parsing, or set ContextTimeoutEnabled")
	}
	leaving, leave := context.WithCancel(context.Background())
	over, end := context.WithCancel(context.Background())
	// The tick's calls are timed one by one (stepCalls): a stall that
	// holds one of them is a window the monitor could not watch
	// (TestTickHeldWhileWorkersCannotBeatKillsNothing).
	store.Client().AddHook(callTiming{})
	return &Supervisor{
		leaving:  leaving,
		leave:    leave,
		over:     over,
		end:      end,
		cfg:      cfg,
		store:    store,
		log:      cfg.Logger,
		logs:     logTail{max: cfg.LogTail, lines: map[health.ComponentID]*tail{}},
		exits:    make(chan exitMsg),
		timers:   make(chan timerMsg),
		cmds:     make(chan func()),
		ticks:    make(chan struct{}, 1),
		gone:     make(chan goneMsg),
		up:       make(chan struct{}),
		quit:     make(chan struct{}),
		stopCmds: make(chan struct{}),
		dead:     make(chan struct{}),
		done:     make(chan struct{}),
		workers:  map[health.ComponentID]*worker{},
		drained:  make(chan struct{}),
		redis:    newAvailability(cfg.Heartbeat.TTL, cfg.Heartbeat.Interval, cfg.OpTimeout),
		pulses:   make(chan struct{}, 1),
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (s *Supervisor) Config() Config { return s.cfg }

// Store returns the health store.
func (s *Supervisor) Store() *health.Store { return s.store }

// Clock returns the supervisor's clock.
func (s *Supervisor) Clock() clock.Clock { return s.cfg.Clock }

// Start reconciles what Redis says this host ran (docs/design.md §4.6) and
// starts the pools. It fails, starting nothing, when Redis does not answer.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopping {
		s.mu.Unlock()
		return errors.New("supervisor: Start called twice")
	}
	s.started = true
	s.mu.Unlock()

	fail := func(err error) error {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return err
	}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout*5)
	defer cancel()
	if err := s.joinCluster(octx); err != nil {
		return fail(err)
	}
	s.spawner = newSpawner()
	go s.monitor()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serveCommands()
	}()
	return s.call(ctx, func() {
		s.tick(true)
		s.armPulse()
	})
}

// Run starts the supervisor, waits for ctx to end and stops it gracefully.
func (s *Supervisor) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop(context.Background())
}

// stopGrace is how long Stop waits, once its context has ended and it has
// SIGKILLed what was left, for the monitor to see those exits and finish.
const stopGrace = time.Second

// Stop shuts the host's workers down in parallel (docs/design.md §4.5): each gets
// SIGTERM, then SIGKILL after stop_timeout; crashed ones waiting for a
// restart are stopped; then the leases are released. It returns once every
// child has exited, or when ctx ends: then it SIGKILLs every process group
// still alive, waits a moment for the monitor to finish, and returns ctx's
// error. It never waits longer (TestStopHonoursContext). Safe before
// Start, twice, and from several goroutines.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.stopping = true
		s.mu.Unlock()
		return nil
	}
	if !s.stopping {
		s.stopping = true
		go s.shutdownInOrder()
	}
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	n := s.groups.killAll()
	s.killDescendants() // and what exited workers left behind (reap_linux.go)
	s.log.Warn("stop: out of time: every worker process still alive SIGKILLed", "groups", n, "err", ctx.Err())
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.log.Error("stop: the supervisor did not finish in time after its workers were killed")
	}
	return fmt.Errorf("stop: %w", ctx.Err())
}

// shutdownInOrder stops the host, senders before receivers: no more
// commands from other hosts, every worker stopped, leases released, then
// the monitor and what it waits for. It closes done at the end.
func (s *Supervisor) shutdownInOrder() {
	// The releases that end a graceful stop give up at stop_timeout + 1 s
	// from its start (the workers' own stop takes up to stop_timeout): a
	// Stop returns within stop_timeout + 2 s even when a Redis shard that
	// failed over, and not the others, keeps every release waiting (the
	// explorer's replay list, explore/testdata/seeds.txt, holds it). A
	// release not written is a lease that expires instead.
	releaseBy := time.Now().Add(s.cfg.StopTimeout + time.Second)
	// A tick waiting on Redis gives up, and the wake-up of the command
	// reader is not waited for: on a Redis node that died (a Cluster
	// master SIGKILLed) each would hold the shutdown for up to 5 and 1
	// op_timeouts (TestStopDuringATickOnADeadShard).
	s.leave()
	close(s.stopCmds)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wctx, cancel := context.WithTimeout(s.over, s.cfg.OpTimeout)
		defer cancel()
		_ = s.store.Client().RPush(wctx, s.store.Keys().Commands(s.cfg.Host), wakeUp).Err()
	}()
	_ = s.call(context.Background(), s.shutdown)
	<-s.drained
	_ = s.call(context.Background(), func() { s.releaseAll(releaseBy) })
	close(s.quit)
	<-s.dead
	s.wg.Wait()
	s.spawner.close()
	close(s.done)
}

// call runs fn in the monitor goroutine and waits for it.
func (s *Supervisor) call(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case s.cmds <- func() { fn(); close(done) }:
	case <-s.dead:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Supervisor) pool(queue string) *Pool {
	for i := range s.cfg.Pools {
		if s.cfg.Pools[i].Queue == queue {
			return &s.cfg.Pools[i]
		}
	}
	return nil
}

// honoursDeadlines reports whether rdb bounds a call on the socket by its
// context's deadline (go-redis's ContextTimeoutEnabled): the monitor's
// op_timeout is a bound only then, so New warns of a client without it
// (TestClientWithoutDeadlinesIsReported). A client of a kind it does not
// know is taken to.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}
