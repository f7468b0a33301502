package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Fields of the control hash this file owns (DESIGN.md §3, §10, §11).
const (
	fieldPoolPrefix  = "pool:"
	fieldPoolsConfig = "pools_config"
	fieldDrainPrefix = "drain:"
	fieldLostPrefix  = "lost:"
)

// ErrHostInUse is returned by Start when a live host already has this id.
var ErrHostInUse = errors.New("host id in use")

// clusterState is the monitor's view of the cluster.
type clusterState struct {
	me        string // lease value: <host>/<instance>
	takeover  string // lease prefix of this host's earlier instances
	started   time.Time
	sizes     map[string]int
	draining  bool
	leader    bool
	freeSeen  bool              // free slots were left at the previous tick
	lastStats map[string]string // leader: last announced queue stats
	tick      func() bool       // stops the tick timer
	early     time.Duration     // next tick sooner than a third of a lease
}

// joinCluster registers this host (DESIGN.md §11): a live record with this
// id is refused, unless it is an earlier instance on this machine whose
// process is gone. It then applies the configured pool sizes if they differ
// from the ones the last configuration applied.
func (s *Supervisor) joinCluster(ctx context.Context) error {
	c := &s.cluster
	c.me = health.LeaseValue(s.cfg.Host, s.cfg.Instance)
	c.takeover = s.cfg.Host + "/"
	c.started = s.cfg.Clock.Now()
	// A newer key layout means a newer vigil upgraded this Redis: refuse.
	if was, err := s.store.CheckSchema(ctx); err != nil {
		return fmt.Errorf("join cluster: %w", err)
	} else if was != health.SchemaVersion {
		s.log.Info("key layout version written", "schema", health.SchemaVersion, "previous", was)
	}
	prev, err := s.store.ReadHost(ctx, s.cfg.Host)
	if err != nil {
		return fmt.Errorf("join cluster: %w", err)
	}
	if prev.Alive && prev.Instance != s.cfg.Instance {
		hn, _ := os.Hostname()
		if prev.Hostname != hn || pidAlive(prev.PID) {
			return fmt.Errorf("%w: host %q is alive (instance %s, pid %d on %s, seen %s ago); stop it or set another host id",
				ErrHostInUse, s.cfg.Host, prev.Instance, prev.PID, prev.Hostname, s.cfg.Clock.Now().Sub(prev.SeenAt).Round(time.Millisecond))
		}
		s.log.Info("taking over from this host's previous instance", "instance", prev.Instance, "pid", prev.PID)
	}
	if err := s.writeHost(ctx, 0); err != nil {
		return err
	}
	return s.applyPoolSizes(ctx)
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
// they differ from those the last configuration applied (DESIGN.md §10);
// sizes set through the API since then hold otherwise.
func (s *Supervisor) applyPoolSizes(ctx context.Context) error {
	sig := s.poolsSignature()
	k := s.store.Keys().Control()
	cur, err := s.store.Client().HGet(ctx, k, fieldPoolsConfig).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read pool sizes: %w", err)
	}
	if cur == sig {
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
	now := s.cfg.Clock.Now()
	return s.store.WriteHost(ctx, health.Host{
		ID: s.cfg.Host, Instance: s.cfg.Instance, PID: os.Getpid(), Hostname: hn, Version: s.cfg.Version,
		Address: s.cfg.Address, Capacity: s.cfg.Capacity, Slots: slots, Draining: s.cluster.draining,
		Leader: s.cluster.leader, StartedAt: s.cluster.started, SeenAt: now,
	}, s.cfg.Lease)
}

// hostEvent announces something about this host on its topic.
func (s *Supervisor) hostEvent(ctx context.Context, action, result string) {
	e := health.Event{Topic: "host:" + s.cfg.Host + ":status", Type: health.EventAction,
		Timestamp: s.cfg.Clock.Now().UnixMilli(), Action: &health.ActionView{Action: action, Target: s.cfg.Host, Result: result}}
	if _, err := s.store.AddEvent(ctx, e); err != nil {
		s.log.Warn("announce host event", "action", action, "err", err)
	}
}

func (s *Supervisor) armTick() {
	if s.cluster.tick != nil {
		s.cluster.tick()
	}
	d := s.cfg.Lease / 3
	if s.cluster.early > 0 && s.cluster.early < d {
		d = s.cluster.early // a lost host's lease expires before the next tick
	}
	s.cluster.early = 0
	// Leases expire on Redis's clock, so ticks follow real time whatever
	// clock the rest of the supervisor uses.
	t := time.AfterFunc(d, func() {
		select {
		case s.ticks <- struct{}{}:
		default:
		}
	})
	s.cluster.tick = t.Stop
}

// tick renews this host's leases, fences lost ones, follows pool sizes and
// drain, claims its fair share of free slots, hands extra slots to hosts
// with room, and runs the leader's chores. It runs every third of a lease.
func (s *Supervisor) tick(first bool) {
	if s.shuttingDown {
		return
	}
	defer s.armTick()
	if s.redisDown {
		return // nothing is fenced or moved while Redis is unreachable
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*s.cfg.OpTimeout)
	defer cancel()
	if err := s.clusterTick(ctx, first); err != nil {
		s.redisFailed(err)
	}
	if first {
		s.log.Info("supervisor started", "host", s.cfg.Host, "instance", s.cfg.Instance, "components", len(s.workers))
	}
}

func (s *Supervisor) clusterTick(ctx context.Context, first bool) error {
	keys := s.store.Keys()
	// 1. Renew what we hold; fence what we lost.
	held := s.ids()
	if len(held) > 0 {
		lk := make([]string, len(held))
		for i, id := range held {
			lk[i] = keys.Slot(id)
		}
		lost, err := s.store.Renew(ctx, lk, s.cluster.me, s.cfg.Lease)
		if err != nil {
			return err
		}
		for i, id := range held {
			if lost[i] {
				s.fence(s.workers[id])
			}
		}
	}
	// 2. Read sizes, drain flags and hosts.
	control, err := s.store.Client().HGetAll(ctx, keys.Control()).Result()
	if err != nil {
		return fmt.Errorf("read control: %w", err)
	}
	s.cluster.sizes = map[string]int{}
	for _, p := range s.cfg.Pools {
		n := p.Workers
		if v, ok := control[fieldPoolPrefix+p.Queue]; ok {
			n, _ = strconv.Atoi(v)
		}
		s.cluster.sizes[p.Queue] = n
	}
	wasDraining := s.cluster.draining
	s.cluster.draining = control[fieldDrainPrefix+s.cfg.Host] == "1"
	if s.cluster.draining != wasDraining {
		s.log.Info("drain changed", "draining", s.cluster.draining)
	}
	hosts, err := s.store.Hosts(ctx)
	if err != nil {
		return err
	}
	// This host's record is written every tick with a lease as its TTL: if
	// it is gone although no call failed since, Redis lost its data (a
	// restart without persistence, a failover to an empty replica). Write
	// the state again from the live processes and the config, as after an
	// outage that was noticed.
	if !first && !listed(hosts, s.cfg.Host) {
		s.log.Warn("this host's record is gone from Redis: it lost its data; writing the state again")
		if err := s.applyPoolSizes(ctx); err != nil {
			return err
		}
		s.rewriteState("state written again after Redis lost its data")
		if s.redisDown {
			return nil
		}
	}
	// 3. Release what we should not hold: slots beyond a shrunk pool, all
	// of them while draining.
	for _, id := range s.ids() {
		w := s.workers[id]
		switch {
		case w.releasing || w.fenced:
		case s.cluster.draining:
			s.release(w, "drain")
		case id.Slot >= s.cluster.sizes[id.Queue]:
			s.release(w, "pool shrink")
		}
	}
	// 4. Claim free slots up to our fair share.
	var all []health.ComponentID
	for _, p := range s.cfg.Pools {
		for slot := range s.cluster.sizes[p.Queue] {
			all = append(all, health.ComponentID{Queue: p.Queue, Slot: slot})
		}
	}
	want, others := s.fairShare(hosts, control, len(all))
	holding := s.holding()
	if !s.cluster.draining && len(all) > 0 {
		lk := make([]string, len(all))
		for i, id := range all {
			lk[i] = keys.Slot(id)
		}
		holders, err := s.store.LeaseHolders(ctx, lk)
		if err != nil {
			return err
		}
		var free, foreign []int
		for i, h := range holders {
			switch {
			case h == "" || (h != s.cluster.me && strings.HasPrefix(h, s.cluster.takeover)):
				free = append(free, i)
			case h != s.cluster.me:
				foreign = append(foreign, i)
			}
		}
		if len(foreign) > 0 {
			if err := s.watchExpiring(ctx, lk, foreign); err != nil {
				return err
			}
		}
		// Start at a host-specific offset so that hosts starting together
		// do not race for the same slots.
		off := int(hashString(s.cfg.Host) % uint32(max(1, len(free))))
		free = append(free[off:], free[:off]...)
		limit := want
		if s.cluster.freeSeen && !first && (s.cfg.Capacity == 0 || holding < s.cfg.Capacity) {
			limit = holding + 1 // slots nobody took for a whole tick: take one more
		}
		var toAdopt []health.ComponentID
		for _, i := range free {
			if holding >= limit {
				break
			}
			ok, err := s.store.Claim(ctx, lk[i], s.cluster.me, s.cluster.takeover, s.cfg.Lease)
			if err != nil {
				return err
			}
			if ok && s.workers[all[i]] == nil {
				toAdopt = append(toAdopt, all[i])
				holding++
			}
		}
		s.cluster.freeSeen = len(free) > len(toAdopt)
		if len(toAdopt) > 0 {
			recs, err := s.store.GetMany(ctx, toAdopt)
			if err != nil {
				return err
			}
			for i, id := range toAdopt {
				s.adopt(id, recs[i])
			}
		}
	}
	// 5. Hand one extra slot per tick to a host below its share.
	if holding > want && others && !s.cluster.draining {
		ids := s.ids()
		for i := len(ids) - 1; i >= 0; i-- {
			if w := s.workers[ids[i]]; !w.releasing && !w.fenced {
				s.release(w, "rebalance")
				break
			}
		}
	}
	// 6. Our record, then the leader's lease and chores.
	if err := s.writeHost(ctx, s.holding()); err != nil {
		return err
	}
	return s.leaderTick(ctx, hosts, control)
}

// watchExpiring looks at the leases other hosts hold: a live holder renews
// every third of a lease, so a lease with less than half a lease left has
// missed a renewal — its host is likely gone. The next tick is then armed
// for just after it expires (and after the host's record, written a moment
// after its leases, does), so that the slot is taken over at once rather
// than up to a third of a lease later.
func (s *Supervisor) watchExpiring(ctx context.Context, keys []string, idx []int) error {
	pipe := s.store.Client().Pipeline()
	cmds := make([]*redis.DurationCmd, len(idx))
	for j, i := range idx {
		cmds[j] = pipe.PTTL(ctx, keys[i])
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read lease expiries: %w", err)
	}
	for _, c := range cmds {
		if ttl := c.Val(); ttl > 0 && ttl < s.cfg.Lease/2 {
			d := ttl + 50*time.Millisecond
			if s.cluster.early == 0 || d < s.cluster.early {
				s.cluster.early = d
			}
		}
	}
	return nil
}

// holding counts the slots this host holds and keeps.
func (s *Supervisor) holding() int {
	n := 0
	for _, w := range s.workers {
		if !w.releasing && !w.fenced {
			n++
		}
	}
	return n
}

// fairShare returns how many of total slots this host should hold, and
// whether another live host has room below its own share.
func (s *Supervisor) fairShare(hosts []health.Host, control map[string]string, total int) (want int, others bool) {
	type live struct{ slots, capacity int }
	var ls []live
	me := -1
	for _, h := range hosts {
		if !h.Alive || control[fieldDrainPrefix+h.ID] == "1" {
			continue
		}
		if h.ID == s.cfg.Host {
			me = len(ls)
		}
		ls = append(ls, live{h.Slots, h.Capacity})
	}
	if me < 0 && !s.cluster.draining {
		me = len(ls)
		ls = append(ls, live{s.holding(), s.cfg.Capacity})
	}
	if len(ls) == 0 {
		return 0, false
	}
	share := (total + len(ls) - 1) / len(ls)
	capped := func(c int) int {
		if c > 0 {
			return min(c, share)
		}
		return share
	}
	for i, l := range ls {
		if i != me && l.slots < capped(l.capacity) {
			others = true
		}
	}
	return capped(s.cfg.Capacity), others
}

func hashString(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// release stops w gracefully, then gives its slot up for another host.
func (s *Supervisor) release(w *worker, reason string) {
	w.releasing = true
	s.logw(w).Info("releasing slot", "reason", reason)
	s.stopWorker(w, reason, false, func() { s.forget(w, true) })
}

// forget drops w from this host, releasing its lease if asked.
func (s *Supervisor) forget(w *worker, releaseLease bool) {
	for k := range numTimers {
		s.disarm(w, k)
	}
	delete(s.workers, w.id)
	if releaseLease && !s.redisDown {
		ctx, cancel := s.opCtx()
		defer cancel()
		if err := s.store.Release(ctx, s.store.Keys().Slot(w.id), s.cluster.me); err != nil {
			s.logw(w).Warn("release slot lease", "err", err)
		}
	}
}

// fence stops w at once: its lease is another host's now (DESIGN.md §11).
// SIGTERM lets the worker hand back what it runs; SIGKILL follows after
// stop_timeout. Its record belongs to the new owner, so nothing is written.
func (s *Supervisor) fence(w *worker) {
	s.logw(w).Warn("slot lease lost to another host: stopping the worker at once")
	w.fenced = true
	for _, k := range []timerKind{timerCheck, timerRestart} {
		s.disarm(w, k)
	}
	if w.proc == nil {
		s.forget(w, false)
		return
	}
	_ = signalGroup(w.proc.pid, sigTerm)
	s.arm(w, timerKill, s.cfg.StopTimeout)
}

// releaseAll gives up every lease this host holds (graceful shutdown).
func (s *Supervisor) releaseAll() {
	if s.redisDown {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*s.cfg.OpTimeout)
	defer cancel()
	keys := s.store.Keys()
	for _, id := range s.ids() {
		if err := s.store.Release(ctx, keys.Slot(id), s.cluster.me); err != nil {
			s.log.Warn("release slot lease", "component", id.String(), "err", err)
		}
	}
	if s.cluster.leader {
		_ = s.store.Release(ctx, keys.Leader(), s.cluster.me)
	}
	s.cluster.leader = false
	if err := s.store.Client().Del(ctx, keys.Host(s.cfg.Host)).Err(); err != nil {
		s.log.Warn("remove host record", "err", err)
	}
	// Stopped, not lost: the leader neither announces nor alerts it.
	if err := s.store.Client().HSet(ctx, keys.Control(), fieldLostPrefix+s.cfg.Host, "stopped").Err(); err != nil {
		s.log.Warn("record a graceful stop", "err", err)
	}
	s.hostEvent(ctx, "stopped", "")
}

// leaderTick claims or renews the leader lease and, when leader, notices
// lost hosts, announces queue statistics and trims the event stream.
func (s *Supervisor) leaderTick(ctx context.Context, hosts []health.Host, control map[string]string) error {
	keys := s.store.Keys()
	ok, err := s.store.Claim(ctx, keys.Leader(), s.cluster.me, s.cluster.takeover, s.cfg.Lease)
	if err != nil {
		return err
	}
	if ok != s.cluster.leader {
		s.cluster.leader = ok
		s.log.Info("leadership changed", "leader", ok)
		if ok {
			s.hostEvent(ctx, "leader", s.cfg.Host)
		}
	}
	if !ok {
		return nil
	}
	now := s.cfg.Clock.Now()
	for _, h := range hosts {
		f := fieldLostPrefix + h.ID
		// This host is alive whatever its record says: the record expires
		// during a Redis outage longer than a lease, and this tick, which
		// reads the hosts before writing its own record, is the first after.
		if h.Alive || h.ID == s.cfg.Host {
			if _, was := control[f]; was {
				s.store.Client().HDel(ctx, keys.Control(), f)
			}
			continue
		}
		if _, done := control[f]; done {
			if now.Sub(h.SeenAt) > time.Hour { // forget long-lost hosts
				s.store.Client().ZRem(ctx, keys.Hosts(), h.ID)
				s.store.Client().HDel(ctx, keys.Control(), f)
			}
			continue
		}
		s.log.Warn("host lost", "lost_host", h.ID, "last_seen", h.SeenAt)
		data, _ := json.Marshal(map[string]any{"host": h.ID, "status": "lost", "last_seen": h.SeenAt.UnixMilli()})
		ev := health.Event{Topic: "host:" + h.ID + ":status", Type: health.EventHost, Timestamp: now.UnixMilli(), Data: data}
		if _, err := s.store.AddEvent(ctx, ev); err != nil {
			return err
		}
		s.cfg.Metrics.HostLost()
		s.alert("host_lost", ev)
		s.store.Client().HSet(ctx, keys.Control(), f, now.UnixMilli())
	}
	if s.cfg.Stats != nil {
		s.announceStats(ctx)
	}
	return s.store.Client().XTrimMaxLenApprox(ctx, keys.Events(), health.MaxEventsDefault, 0).Err()
}

// announceStats emits queue_update events for the queues whose statistics
// changed since the last tick.
func (s *Supervisor) announceStats(ctx context.Context) {
	var queues []string
	for q := range s.cluster.sizes {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	stats, err := s.cfg.Stats(ctx, queues)
	if err != nil {
		s.log.Warn("queue statistics", "err", err)
		return
	}
	if s.cluster.lastStats == nil {
		s.cluster.lastStats = map[string]string{}
	}
	for q, v := range stats {
		data, _ := json.Marshal(v)
		if s.cluster.lastStats[q] == string(data) {
			continue
		}
		s.cluster.lastStats[q] = string(data)
		topic := "queue:" + q + ":status"
		if q == "" {
			topic = "queue:status"
		}
		if _, err := s.store.AddEvent(ctx, health.Event{Topic: topic, Type: health.EventQueue,
			Timestamp: s.cfg.Clock.Now().UnixMilli(), Data: data}); err != nil {
			s.log.Warn("announce queue statistics", "err", err)
			return
		}
	}
}

// RollingRestart restarts the pool's workers one at a time, cluster-wide
// (for deploys; failed and held workers are left alone): each is restarted (on whichever host holds it) and the next
// waits until it is healthy again, or start_timeout passed. It returns at
// once with the number of workers it will restart; the rollout runs until
// done or until the supervisor stops.
func (s *Supervisor) RollingRestart(ctx context.Context, queue string) (int, error) {
	sizes, err := PoolSizes(ctx, s.store)
	if err != nil {
		return 0, err
	}
	n, ok := sizes[queue]
	if !ok {
		return 0, fmt.Errorf("pool %s: %w", queue, ErrUnknownComponent)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		rctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stopCmds:
				cancel()
			case <-rctx.Done():
			}
		}()
		s.log.Info("rolling restart", "queue", queue, "workers", n)
		for slot := range n {
			id := health.ComponentID{Queue: queue, Slot: slot}
			if c, err := s.store.Get(rctx, id); err == nil && (c.Status == health.StatusFailed || (c.Status == health.StatusStopped && c.Held)) {
				s.log.Info("rolling restart: leaving a failed or held worker as it is", "component", id.String(), "status", string(c.Status))
				continue
			}
			if _, err := s.Restart(rctx, id); err != nil {
				s.log.Warn("rolling restart: skipping", "component", id.String(), "err", err)
				continue
			}
			if !s.waitHealthy(rctx, id, s.cfg.Heartbeat.StartTimeout) {
				if rctx.Err() != nil {
					return
				}
				s.log.Warn("rolling restart: not healthy in time, going on", "component", id.String())
			}
		}
		s.log.Info("rolling restart done", "queue", queue)
	}()
	return n, nil
}

// waitHealthy polls id's record until it is healthy, ctx ends or timeout.
func (s *Supervisor) waitHealthy(ctx context.Context, id health.ComponentID, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := s.store.Get(ctx, id)
		if err == nil && c.Status == health.StatusHealthy {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}
