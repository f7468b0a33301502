package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Fields of the control hash this file owns (docs/design.md §3, §10, §11).
const (
	fieldPoolPrefix  = "pool:"
	fieldPoolsConfig = "pools_config"
	fieldDrainPrefix = "drain:"
	fieldLostPrefix  = "lost:"
	// fieldWatchedPrefix+host is the seen_at (ms) of host's record when its
	// watchers put its leases in the free set, and the queues they did it
	// for (claim.go, watchNote).
	fieldWatchedPrefix = "watched:"
)

// ErrHostInUse is returned by Start when a live host already has this id.
var ErrHostInUse = errors.New("host id in use")

// clusterState is the monitor's view of the cluster.
type clusterState struct {
	me           string // lease value: <host>/<instance>
	takeover     string // lease prefix of this host's earlier instances
	started      time.Time
	sizes        map[string]int
	draining     bool
	leader       bool
	freeSeen     bool                // free slots were left at the previous tick
	scanNext     bool                // the next claim reads every lease (see needScan)
	watching     map[string]string   // control fields to write once this tick's scan is done: the late hosts it watched (see needScan)
	alive        map[string][]string // hosts alive at the last tick, with the queues their records listed
	scannedSizes string              // pool sizes at the last tick
	unreleased   []health.Component  // forgotten while Redis did not answer (their last records): released at the next tick
	lastStats    map[string]string   // leader: last announced queue stats
	tick         func() bool         // stops the tick timer
	early        time.Duration       // next tick sooner than a third of a lease
	adoptEach    time.Duration       // what adopting one slot took at the last ticks (claim)
	refused      map[string]string   // queue → pool size in Redis refused (logged once)
	left         bool                // shut down: leases released, no more ticks
	hostWritten  time.Time           // real time of the last write of this host's record (it expires a lease later)
	leaseLost    bool                // this tick's renewal found a lease gone before it could expire: Redis lost it
	lapsed       []*worker           // leases a renewal took again after a lapse, or found held after a failed renewal (Redis may have lost its data meanwhile), until a tick reads their records
	renewFailed  bool                // the last renewal failed: it may have run unanswered
}

// joinCluster registers this host (docs/design.md §11): a live record with this
// id is refused, unless it is an earlier instance on this machine whose
// process is gone. It then applies the configured pool sizes if they differ
// from the ones the last configuration applied.
func (s *Supervisor) joinCluster(ctx context.Context) error {
	c := &s.cluster
	c.me = health.LeaseValue(s.cfg.Host, s.cfg.Instance)
	c.takeover = s.cfg.Host + "/"
	c.started = s.cfg.Clock.Now()
	// A start that Redis does not answer is tried again and again; its
	// earlier instance's frozen orphans must not wait for Redis meanwhile:
	// no worker outlives its supervisor by more than stop_timeout + 1 s,
	// and an outage can last longer than that, every start failing as it
	// reads Redis (TestRestartedHostKillsItsFrozenOrphanDuringAnOutage).
	// A start that fails before it could read this host's record
	// cannot tell them from a live instance's (a second vigil with this
	// host id on this machine, refused once Redis answers): those frozen
	// workers, if any, are killed too. A start that reads the record kills
	// them only once it knows no live instance holds the host id.
	unreachable := func(err error) error {
		s.earlierWorkers() // kills the frozen ones
		return fmt.Errorf("join cluster: %w", err)
	}
	// A newer key layout means a newer vigil upgraded this Redis: refuse.
	if was, err := s.store.CheckSchema(ctx); err != nil {
		return unreachable(err)
	} else if was != health.SchemaVersion {
		s.log.Info("key layout version written", "schema", health.SchemaVersion, "previous", was)
	}
	prev, err := s.store.ReadHost(ctx, s.cfg.Host)
	if err != nil {
		return unreachable(err)
	}
	if prev.Alive && prev.Instance != s.cfg.Instance {
		hn, _ := os.Hostname()
		if prev.Hostname != hn || pidAlive(prev.PID) {
			return fmt.Errorf("%w: host %q is alive (instance %s, pid %d on %s, seen %s ago); stop it or set another host id",
				ErrHostInUse, s.cfg.Host, prev.Instance, prev.PID, prev.Hostname, s.cfg.Clock.Now().Sub(prev.SeenAt).Round(time.Millisecond))
		}
		s.log.Info("taking over from this host's previous instance", "instance", prev.Instance, "pid", prev.PID)
	}
	s.earlier = s.earlierWorkers()
	if err := s.writeHost(ctx, 0); err != nil {
		return err
	}
	return s.applyPoolSizes(ctx, false)
}

// listed reports whether host id is among hosts and alive.
func listed(hosts []health.Host, id string) bool {
	for _, h := range hosts {
		if h.ID == id {
			return h.Alive
		}
	}
	return false
}

func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// poolsSignature is the canonical form of the configured pool sizes.
func (s *Supervisor) poolsSignature() string {
	var parts []string
	for _, p := range s.cfg.Pools {
		parts = append(parts, p.Queue+"="+strconv.Itoa(p.Workers))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// applyPoolSizes writes this host's configured pool sizes to the cluster if
// they differ from those the last configuration applied (docs/design.md §10);
// sizes set through the API since then hold otherwise. With ifLost, only
// if no configuration is applied (Redis lost it): the writes after a loss
// put back what is gone, not this host's configuration over a newer one
// another host applied since (a rolling change), nor over the sizes set
// through the API since that.
func (s *Supervisor) applyPoolSizes(ctx context.Context, ifLost bool) error {
	sig := s.poolsSignature()
	k := s.store.Keys().Control()
	cur, err := s.store.Client().HGet(ctx, k, fieldPoolsConfig).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read pool sizes: %w", err)
	}
	if cur == sig || ifLost && cur != "" {
		return nil
	}
	vals := []any{fieldPoolsConfig, sig}
	for _, p := range s.cfg.Pools {
		vals = append(vals, fieldPoolPrefix+p.Queue, p.Workers)
	}
	if err := s.store.Client().HSet(ctx, k, vals...).Err(); err != nil {
		return fmt.Errorf("apply pool sizes: %w", err)
	}
	s.log.Info("applied this host's configured pool sizes to the cluster", "pools", sig, "previous", cur)
	s.hostEvent(ctx, "pools_applied", sig)
	return nil
}

// SetPoolSize sets a pool's cluster-wide size (PUT /api/v1/pools/{queue}).
func SetPoolSize(ctx context.Context, store *health.Store, queue string, size int) error {
	if err := health.CheckName("queue", queue); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("pool size must be >= 0, got %d", size)
	}
	// The API bounds the size by max_pool_size; each host caps what it
	// reads by its own (see poolSizes).
	return store.Client().HSet(ctx, store.Keys().Control(), fieldPoolPrefix+queue, size).Err()
}

// PoolSizes reads every pool size set in the cluster.
func PoolSizes(ctx context.Context, store *health.Store) (map[string]int, error) {
	m, err := store.Client().HGetAll(ctx, store.Keys().Control()).Result()
	if err != nil {
		return nil, fmt.Errorf("read pool sizes: %w", err)
	}
	out := map[string]int{}
	for f, v := range m {
		if q, ok := strings.CutPrefix(f, fieldPoolPrefix); ok {
			out[q], _ = strconv.Atoi(v)
		}
	}
	return out, nil
}

// SetDrain sets or clears host's drain flag; the host releases (or may
// claim again) its slots at its next tick.
func SetDrain(ctx context.Context, store *health.Store, host string, drain bool) error {
	if err := health.CheckName("host", host); err != nil {
		return err
	}
	k, f := store.Keys().Control(), fieldDrainPrefix+host
	if drain {
		return store.Client().HSet(ctx, k, f, "1").Err()
	}
	return store.Client().HDel(ctx, k, f).Err()
}

func (s *Supervisor) writeHost(ctx context.Context, slots int) error {
	hn, _ := os.Hostname()
	now, sent := s.cfg.Clock.Now(), time.Now()
	err := s.store.WriteHost(ctx, health.Host{
		ID: s.cfg.Host, Instance: s.cfg.Instance, PID: os.Getpid(), Hostname: hn, Version: s.cfg.Version,
		Address: s.cfg.Address, Capacity: s.cfg.Capacity, Slots: slots, Draining: s.cluster.draining,
		Leader: s.cluster.leader, Queues: s.queues(), StartedAt: s.cluster.started, SeenAt: now,
	}, s.cfg.Lease)
	if err == nil {
		s.cluster.hostWritten = sent
	}
	return err
}

// queues lists the queues of this host's pools, sorted.
func (s *Supervisor) queues() []string {
	qs := make([]string, 0, len(s.cfg.Pools))
	for _, p := range s.cfg.Pools {
		qs = append(qs, p.Queue)
	}
	slices.Sort(qs)
	return slices.Compact(qs)
}

// hostEvent announces something about this host on its topic.
func (s *Supervisor) hostEvent(ctx context.Context, action, result string) {
	e := health.Event{Topic: "host:" + s.cfg.Host + ":status", Type: health.EventAction,
		Timestamp: s.cfg.Clock.Now().UnixMilli(), Action: &health.ActionView{Action: action, Target: s.cfg.Host, Result: result}}
	if _, err := s.store.AddEvent(ctx, e); err != nil {
		s.log.Warn("announce host event", "action", action, "err", err)
	}
}

// earlierWorkers finds, on this machine, the live worker processes of
// this host's earlier instances (earlierWorkersOf), by slot, and SIGKILLs
// the frozen ones.
func (s *Supervisor) earlierWorkers() map[health.ComponentID]int {
	found, _ := earlierWorkersOf(s.cfg.Host, s.cfg.RedisURL, s.store.Keys().Prefix, s.cfg.Instance, s.log)
	return found
}

// KillFrozenOrphans SIGKILLs, on this machine, the frozen (stopped) worker
// processes of host's earlier vigil processes in the cluster at redisURL
// and key prefix (the workers' VIGIL_HOST, VIGIL_REDIS_URL, VIGIL_PREFIX),
// and returns how many. A start that fails before its supervisor joins the
// cluster (Redis does not answer) calls it: a frozen orphan cannot act on
// its parent-death signal, and nothing else kills it until Redis answers,
// while no worker may outlive its supervisor by more than stop_timeout +
// 1 s (TestKillFrozenOrphans). It cannot tell them from the workers
// of a live vigil with this host id on this machine, which a start that
// reads Redis refuses (ErrHostInUse): those, if stopped, are killed too.
func KillFrozenOrphans(host, redisURL, prefix string, log *slog.Logger) int {
	if log == nil {
		log = slog.Default()
	}
	_, killed := earlierWorkersOf(host, redisURL, prefix, "", log.With("killed_by", "a start that could not reach Redis"))
	return killed
}

// earlierWorkersOf finds, on this machine, the live worker processes of
// host's instances other than instance ("": any) in the cluster at
// redisURL and prefix (their environment names them and a spawn of
// another instance), by slot, and SIGKILLs the frozen ones (SIGSTOP). A
// frozen process does no work and is going anyway (see afterOld); its slot
// may go to other hosts, which kill such a process only when they take the
// slot, a lease and a tick after the instance died: longer than an orphan
// may outlive its supervisor (stop_timeout + 1 s), so the new instance
// kills them whichever slots it takes
// (TestRestartedHostKillsFrozenOrphansOfSlotsItDoesNotTake).
// The others end on their parent-death signal within stop_timeout; a slot
// the new instance takes whose record Redis lost waits for its process
// (adopt), not only one a record names: after a data loss no record names
// the orphan, and without this the frozen one would outlive its
// supervisor while the new instance started a second process for its slot
// (TestRestartedHostAfterADataLossStopsItsOrphans). The frozen ones killed
// are counted, not returned.
func earlierWorkersOf(host, redisURL, prefix, instance string, log *slog.Logger) (found map[health.ComponentID]int, killed int) {
	found = map[health.ComponentID]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return found, 0
	}
	self, mine := os.Getpid(), instance+"."
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
			continue // a worker leads its own process group
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		vars := map[string]string{}
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				switch k {
				case health.EnvRedisURL, health.EnvPrefix, health.EnvHost, health.EnvSpawn, health.EnvComponent:
					vars[k] = v
				}
			}
		}
		// The same host id and prefix on another Redis is another cluster
		// (a second deployment on this machine, or a test beside another):
		// its workers are not this host's to kill or wait for.
		if vars[health.EnvRedisURL] != redisURL || vars[health.EnvPrefix] != prefix || vars[health.EnvHost] != host ||
			vars[health.EnvSpawn] == "" || (instance != "" && strings.HasPrefix(vars[health.EnvSpawn], mine)) {
			continue
		}
		id, err := health.ParseComponentID(vars[health.EnvComponent])
		if err != nil || !ownedProcessAlive(pid, id) {
			continue
		}
		if processStopped(pid) {
			log.Warn("a worker of this host's previous instance is frozen: killing it", "component", id.String(), "pid", pid)
			_ = signalGroup(pid, sigKill)
			killed++
			continue
		}
		found[id] = pid
	}
	return found, killed
}
