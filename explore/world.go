package explore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/explore/internal/hostproto"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/faultproxy"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testledger"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/queue"
)

// Shared is what every seed of one explorer process uses: the binaries and
// the ledger's Redis (a miniredis of its own, apart from every Redis under
// test, keyed by seed).
type Shared struct {
	HostBin, WorkerBin string
	ledger             *miniredis.Miniredis
	ledgerRdb          *redis.Client
	ports              ports // of the redis-server processes (SetPorts)

	workerBins []string      // WorkerBin and its copies (SpreadWorkers)
	nextWorker atomic.Uint32 // round robin over workerBins
}

// SpreadWorkers copies the worker binary so that there are n of it, each
// its own file, and gives each host the next one in turn. Every exec and
// every exit of a process takes its executable's mapping lock (the
// inode's i_mmap_rwsem) for writing; with every worker of every seed
// running one file, a busy 2-core machine holds exiting workers of several
// seeds in D state for seconds (unlink_file_vma_batch_process, under
// exit_mmap), coupling seeds that share nothing else (TestSpreadWorkers).
// The copies are made once, before the first seed, in WorkerBin's
// directory.
func (s *Shared) SpreadWorkers(n int) error {
	bins := []string{s.WorkerBin}
	src, err := os.ReadFile(s.WorkerBin)
	if err != nil {
		return err
	}
	for i := 1; i < n; i++ {
		bin := fmt.Sprintf("%s-%d", s.WorkerBin, i)
		if err := os.WriteFile(bin, src, 0o755); err != nil {
			return err
		}
		bins = append(bins, bin)
	}
	s.workerBins = bins
	return nil
}

// workerBin is the worker binary for the next host.
func (s *Shared) workerBin() string {
	if len(s.workerBins) == 0 {
		return s.WorkerBin
	}
	return s.workerBins[int(s.nextWorker.Add(1)-1)%len(s.workerBins)]
}

// NewShared starts the ledger's Redis for the binaries given.
func NewShared(hostBin, workerBin string) (*Shared, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start the ledger's miniredis: %w", err)
	}
	return &Shared{HostBin: hostBin, WorkerBin: workerBin, ledger: m,
		ledgerRdb: redis.NewClient(&redis.Options{Addr: m.Addr()})}, nil
}

// Close stops the ledger's Redis.
func (s *Shared) Close() {
	_ = s.ledgerRdb.Close()
	s.ledger.Close()
}

// world is one seed's system under test and what watches it.
type world struct {
	plan  Plan
	p     Params
	opts  Options
	sh    *Shared
	dir   string // the hosts' logs
	pfx   string // Vigil's key prefix, unique to the seed
	lpfx  string // the ledger's
	be    backend
	rdb   redis.UniversalClient // straight to the backend, past every proxy
	store *health.Store
	insp  *asynq.Inspector
	qc    *queue.Client
	ctl   *queue.Control
	lr    *testledger.Reader
	hosts []*host
	procs *procTable
	kids  childScanner
	b     *book
	load  loadMeter
	jobs  *jobBook
	v     *verdict

	done    chan struct{} // closed when the seed ends: background work stops
	healing chan struct{} // closed when the faults end: timed faults end at once
	bg      sync.WaitGroup
	ends    sync.WaitGroup // timed faults' ends

	mu       sync.Mutex
	sizes    map[string]int          // pool sizes as last set
	paused   int                     // pauses in force
	born     map[[2]uint64]time.Time // worker process (pid, start) → first seen
	lastSeen map[int]time.Time       // worker pid → last seen alive
	actions  sync.WaitGroup          // operator actions in flight
}

func newWorld(plan Plan, opts Options, sh *Shared) (*world, error) {
	dir, err := os.MkdirTemp(opts.LogDir, fmt.Sprintf("seed-%d-", plan.Params.Seed))
	if err != nil {
		return nil, err
	}
	w := &world{plan: plan, p: plan.Params, opts: opts, sh: sh, dir: dir,
		pfx:   "vx" + strconv.FormatUint(plan.Params.Seed, 10) + ":",
		lpfx:  "L" + strconv.FormatUint(plan.Params.Seed, 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":",
		procs: newProcTable(), done: make(chan struct{}), healing: make(chan struct{}), sizes: map[string]int{},
		born: map[[2]uint64]time.Time{}, lastSeen: map[int]time.Time{}}
	w.v = &verdict{}
	w.jobs = newJobBook()
	var echo func(string)
	if opts.Verbose {
		echo = func(l string) { fmt.Fprintf(opts.Out, "seed %d %s\n", plan.Params.Seed, l) }
	}
	w.b = newBook(time.Now(), echo)
	w.lr = testledger.NewReader(sh.ledgerRdb, w.lpfx)
	for _, p := range w.p.Pools {
		w.sizes[p.Queue] = p.Workers
	}
	return w, nil
}

func (w *world) queues() []string {
	out := make([]string, len(w.p.Pools))
	for i, p := range w.p.Pools {
		out[i] = p.Queue
	}
	return out
}

// maxHosts is how many hosts the seed may run (a host-new step adds one).
func (w *world) maxHosts() int {
	n := w.p.Hosts
	for _, s := range w.plan.Steps {
		if s.Kind == HostNew && s.Host+1 > n {
			n = s.Host + 1
		}
	}
	return n
}

// setup starts Redis, the proxies and the first hosts, and waits until
// every worker is healthy.
func (w *world) setup() error {
	var err error
	switch w.p.Backend {
	case BackendReal:
		w.be, err = newServer(&w.sh.ports)
	case BackendSentinel:
		w.be, err = newSentinelTopo(&w.sh.ports, w.dir)
	case BackendCluster:
		w.be, err = newClusterTopo(&w.sh.ports, w.dir)
	default:
		w.be, err = newMini()
	}
	if err != nil {
		// A constructor's nil pointer in the interface is not nil: the
		// teardown would close it (a failed Cluster setup panicked there).
		w.be = nil
		return err
	}
	topo, _ := w.be.(topology)
	if topo != nil {
		// As Vigil's own clients: the sentinel's guard, the Cluster's
		// slot map reloads (redisconn).
		if w.rdb, err = redisconn.Open(topo.URL()); err != nil {
			return err
		}
	} else {
		w.rdb = redis.NewClient(&redis.Options{Addr: w.be.Addr(), DialTimeout: 300 * time.Millisecond,
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: -1, PoolSize: 8})
	}
	w.store = health.NewStore(w.rdb, w.pfx, 0)
	w.insp = asynq.NewInspectorFromRedisClient(w.rdb)
	w.ctl = queue.NewControl(w.store)
	w.qc = queue.NewClient(w.store, queue.ClientConfig{Queues: w.queues()})
	for i := range w.maxHosts() {
		var proxy *faultproxy.Proxy // none before a topology
		if topo == nil {
			if proxy, err = faultproxy.New(w.be.Addr()); err != nil {
				return err
			}
		}
		id := "h" + strconv.Itoa(i)
		logf, err := os.Create(filepath.Join(w.dir, id+".log"))
		if err != nil {
			if proxy != nil {
				_ = proxy.Close()
			}
			return err
		}
		h := &host{idx: i, id: id, proxy: proxy, bin: w.sh.HostBin, logf: logf, onLag: w.load.hostLag}
		h.cfg = w.hostConfig(h)
		w.hosts = append(w.hosts, h)
	}
	errs := make(chan error, w.p.Hosts)
	for i := range w.p.Hosts {
		go func() { errs <- w.startHost(w.hosts[i]) }()
	}
	for range w.p.Hosts {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	if !w.waitHealthy(30 * time.Second) {
		return fmt.Errorf("setup: the workers did not all turn healthy within 30s: %s", w.describeSlots())
	}
	return nil
}

func (w *world) hostConfig(h *host) hostproto.Config {
	url := ""
	if t, ok := w.be.(topology); ok {
		url = t.URL()
	} else {
		url = "redis://" + h.proxy.Addr()
	}
	cfg := hostproto.Config{
		Host: h.id, RedisURL: url, Prefix: w.pfx,
		Lease: Lease, StopTimeout: StopTimeout, OpTimeout: OpTimeout,
		Interval: HBInterval, TTL: HBTTL, StartTimeout: StartTimeout,
		Policy: policy.Config{BackoffBase: BackoffBase, BackoffMax: BackoffMax, Window: CrashWindow,
			MaxInWindow: w.p.MaxInWindow, MaxLifetime: 100, StableAfter: CrashWindow,
			JobCrashRetries: new(w.p.JobCrashRetries)},
		Schedules: schedDefinitions(),
	}
	bin := w.sh.workerBin()
	for _, p := range w.p.Pools {
		cfg.Pools = append(cfg.Pools, hostproto.Pool{Queue: p.Queue, Workers: p.Workers,
			Command: []string{bin}, Concurrency: p.Concurrency, TaskTimeout: TaskTimeout,
			Env: map[string]string{testledger.EnvURL: "redis://" + w.sh.ledger.Addr(), testledger.EnvPrefix: w.lpfx}})
	}
	return cfg
}

// startHost starts h's process once.
func (w *world) startHost(h *host) error {
	// A host built with -race sleeps a second at exit unless told not to.
	p, err := h.start(append([]string{"GORACE=atexit_sleep_ms=0 halt_on_error=0"}, w.opts.HostEnv...))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.proc = p
	h.mu.Unlock()
	return nil
}

// restartHost starts h again, retrying while Redis does not answer, until
// it runs or the seed ends.
func (w *world) restartHost(h *host, why string) {
	h.mu.Lock()
	if h.proc != nil || h.starting {
		h.mu.Unlock()
		return
	}
	h.starting = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.starting = false
		h.mu.Unlock()
	}()
	for tries := 1; ; tries++ {
		err := w.startHost(h)
		if err == nil {
			p := h.current()
			w.b.logf("%s: %s up again (pid %d, instance %s)", why, h.id, p.pid, p.instance)
			return
		}
		if tries == 1 || tries%10 == 0 {
			w.b.logf("%s: %s start failed (try %d): %v", why, h.id, tries, err)
		}
		select {
		case <-w.done:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// slots lists the components inside the current pool sizes.
func (w *world) slots() []health.ComponentID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []health.ComponentID
	for _, p := range w.p.Pools {
		for i := range w.sizes[p.Queue] {
			ids = append(ids, health.ComponentID{Queue: p.Queue, Slot: i})
		}
	}
	return ids
}

// allSlots lists every component a pool may have had in this seed.
func (w *world) allSlots() []health.ComponentID {
	var ids []health.ComponentID
	for _, p := range w.p.Pools {
		for i := range p.Workers + 2 {
			ids = append(ids, health.ComponentID{Queue: p.Queue, Slot: i})
		}
	}
	return ids
}

func (w *world) records(ids []health.ComponentID) ([]health.Component, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return w.store.GetMany(ctx, ids)
}

// waitHealthy waits until every slot's record is healthy.
func (w *world) waitHealthy(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		cs, err := w.records(w.slots())
		if err == nil {
			ok := true
			for _, c := range cs {
				ok = ok && c.Status == health.StatusHealthy
			}
			if ok {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond) // polling Redis, another process's state
	}
	return false
}

func (w *world) describeSlots() string {
	cs, err := w.records(w.slots())
	if err != nil {
		return err.Error()
	}
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("\n    %s %s held=%v host=%s pid=%d reason=%q restarts=%d/%d", c.ID, c.Status, c.Held, c.Host, c.PID,
			c.Reason, c.Restarts.RestartCount, c.Restarts.LifetimeRestarts)
	}
	return s
}

// teardown kills whatever is left and frees every resource.
func (w *world) teardown() {
	w.stopBackground()
	for _, h := range w.hosts {
		for _, p := range h.processes() {
			p.kill()
		}
	}
	w.bg.Wait()
	w.killStragglers()
	for _, h := range w.hosts {
		if h.proxy != nil {
			_ = h.proxy.Close()
		}
	}
	if w.rdb != nil {
		_ = w.insp.Close() // closes nothing it did not open; the client is ours
		_ = w.rdb.Close()
	}
	if w.be != nil {
		w.be.Close()
	}
	for _, h := range w.hosts {
		_ = h.logf.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.dropLedger(ctx)
}

// dropLedger removes the seed's ledger keys.
func (w *world) dropLedger(ctx context.Context) {
	keys, err := w.sh.ledgerRdb.Keys(ctx, w.lpfx+"*").Result()
	if err == nil && len(keys) > 0 {
		_ = w.sh.ledgerRdb.Del(ctx, keys...).Err()
	}
}

// killStragglers SIGKILLs every worker process of this seed still alive
// (an orphan, or the child of a host killed meanwhile) and reaps them.
func (w *world) killStragglers() {
	for range 50 {
		left := 0
		for _, p := range w.orphans() {
			if p.alive() {
				left++
				_ = killPid(p.pid, true)
			} else {
				reap(p.pid)
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond) // waiting for another process to die
	}
}

// stopBackground closes done once: background work (host restarts, the
// job stream) gives up.
func (w *world) stopBackground() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}
