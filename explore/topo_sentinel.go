package explore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel topology: a master, a replica and one sentinel (quorum 1).
const (
	sentinelMaster = "vigil"
	// downAfter is the sentinel's down-after-milliseconds: a master that
	// does not answer this long is failed over (a SIGKILL, or a pause this
	// long).
	downAfter = time.Second
	// switchWithin bounds a failover: the sentinel names the new master.
	switchWithin = 30 * time.Second
	// syncWithin bounds a rejoin: the old master is a replica in sync.
	syncWithin = 20 * time.Second
)

type sentinelTopo struct {
	pp    *ports
	taken []int
	dir   string
	data  [2]*rnode
	sent  *rnode

	mu   sync.Mutex
	busy bool // a failover or a pause is under way
}

func newSentinelTopo(pp *ports, parent string) (*sentinelTopo, error) {
	ps, err := pp.take(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "sentinel-")
	if err != nil {
		pp.give(ps)
		return nil, err
	}
	t := &sentinelTopo{pp: pp, taken: ps, dir: dir}
	base := func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--dbfilename", "dump-" + strconv.Itoa(port) + ".rdb", "--repl-diskless-sync-delay", "0"}
	}
	for i := range t.data {
		t.data[i] = &rnode{name: "data" + strconv.Itoa(i), port: ps[i], dir: dir, args: base(ps[i])}
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s 3000\n"+
		"sentinel parallel-syncs %s 1\n",
		ps[2], dir, sentinelMaster, ps[0], sentinelMaster, downAfter.Milliseconds(), sentinelMaster, sentinelMaster)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Close()
		return nil, err
	}
	t.sent = &rnode{name: "sentinel", port: ps[2], dir: dir, args: []string{conf, "--sentinel"}}
	err = t.data[0].start()
	if err == nil {
		err = t.data[1].start("--replicaof", "127.0.0.1", strconv.Itoa(ps[0]))
	}
	if err == nil {
		err = t.sent.start()
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = t.waitGood(ctx, t.data[0], t.data[1])
		cancel()
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("sentinel topology: %w", err)
	}
	return t, nil
}

func (t *sentinelTopo) URL() string {
	return "redis-sentinel://" + t.sent.addr() + "/" + sentinelMaster + "/0"
}

// Addr is the master's address as the sentinel names it now.
func (t *sentinelTopo) Addr() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m, err := t.master(ctx); err == nil {
		return m.addr()
	}
	return ""
}

// master is the data node the sentinel names.
func (t *sentinelTopo) master(ctx context.Context) (*rnode, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: t.sent.addr(), DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(a[0], a[1])
	for _, n := range t.data {
		if n.addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("the sentinel names %s, no node of ours", addr)
}

func (t *sentinelTopo) other(n *rnode) *rnode {
	if t.data[0] == n {
		return t.data[1]
	}
	return t.data[0]
}

// waitGood waits until replica is in sync with master and the sentinel
// would pick it for a failover: it knows it as a replica, not down, its
// link to the master up.
func (t *sentinelTopo) waitGood(ctx context.Context, master, replica *rnode) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: t.sent.addr(), DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer sc.Close()
	var last string
	err := pollUntil(ctx, func() (bool, error) {
		if !replica.replicaOf(ctx, master, probeKey(-1)) {
			last = replica.name + " not in sync with " + master.name
			return false, nil
		}
		reps, err := sc.Replicas(ctx, sentinelMaster).Result()
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, r := range reps {
			if r["ip"]+":"+r["port"] == replica.addr() && r["flags"] == "slave" && r["master-link-status"] == "ok" &&
				r["master-host"]+":"+r["master-port"] == master.addr() {
				return true, nil
			}
		}
		last = fmt.Sprintf("the sentinel does not see %s as a good replica yet: %v", replica.name, reps)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, last)
	}
	return nil
}

func (t *sentinelTopo) claim() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy {
		return false
	}
	t.busy = true
	return true
}

func (t *sentinelTopo) unclaim() {
	t.mu.Lock()
	t.busy = false
	t.mu.Unlock()
}

func (t *sentinelTopo) Failover(ctx context.Context, _ int, kill bool) (*failover, error) {
	if !t.claim() {
		return nil, fmt.Errorf("%w: a failover or a pause is under way", errNoFailover)
	}
	m, err := t.master(ctx)
	if err != nil {
		t.unclaim()
		return nil, fmt.Errorf("%w: %v", errNoFailover, err)
	}
	r := t.other(m)
	// The replica must be one the sentinel would pick at once.
	gctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = t.waitGood(gctx, m, r)
	cancel()
	if err != nil {
		t.unclaim()
		return nil, fmt.Errorf("%w: %s is no replica in sync the sentinel would pick", errNoFailover, r.name)
	}
	f := &failover{}
	if kill {
		m.kill()
		f.desc = fmt.Sprintf("master %s (%s) SIGKILLed, %s its replica", m.name, m.addr(), r.name)
	} else {
		sc := redis.NewSentinelClient(&redis.Options{Addr: t.sent.addr(), DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
		err := sc.Failover(ctx, sentinelMaster).Err()
		_ = sc.Close()
		if err != nil {
			t.unclaim()
			return nil, fmt.Errorf("%w: SENTINEL FAILOVER: %v", errNoFailover, err)
		}
		f.desc = fmt.Sprintf("SENTINEL FAILOVER: master %s (%s), %s its replica", m.name, m.addr(), r.name)
	}
	f.switched = func(ctx context.Context) (string, error) {
		began := time.Now()
		err := pollUntil(ctx, func() (bool, error) {
			n, err := t.master(ctx)
			if err != nil || n != r {
				return false, nil
			}
			c := r.client()
			defer c.Close()
			info, err := replication(ctx, c)
			return err == nil && info["role"] == "master", nil
		})
		if err != nil {
			return "", fmt.Errorf("the sentinel did not name %s the master within %s: %w", r.name, switchWithin, err)
		}
		return fmt.Sprintf("the sentinel names %s (%s) the master %s after", r.name, r.addr(), time.Since(began).Round(time.Millisecond)), nil
	}
	f.rejoin = func(ctx context.Context) (string, error) {
		defer t.unclaim()
		if kill {
			if err := m.start("--replicaof", "127.0.0.1", strconv.Itoa(r.port)); err != nil {
				return "", err
			}
		} else if err := t.demote(ctx, m, r); err != nil {
			return "", err
		}
		// In sync is enough here: the sentinel learns of the replica at its
		// next INFO (every 10 s); a failover before then is refused.
		began := time.Now()
		if err := pollUntil(ctx, func() (bool, error) { return m.replicaOf(ctx, r, probeKey(-1)), nil }); err != nil {
			return "", fmt.Errorf("%s not a replica of %s in sync: %w (%s)", m.name, r.name, err, m.describe())
		}
		return fmt.Sprintf("%s is a replica of %s in sync (%s)", m.name, r.name, time.Since(began).Round(time.Millisecond)), nil
	}
	return f, nil
}

// demote makes old, a master the sentinel does not name any more, a
// replica of the new master: the sentinel does the same about 10 s after a
// switch (when it sees the old master still says it is one); the explorer
// does not wait that long, so that a seed may fail over again. Nobody writes to
// old in between: every client follows the sentinel.
func (t *sentinelTopo) demote(ctx context.Context, old, master *rnode) error {
	c := old.client()
	defer c.Close()
	info, err := replication(ctx, c)
	if err != nil {
		return fmt.Errorf("%s: %w", old.name, err)
	}
	if info["role"] == "slave" && info["master_host"]+":"+info["master_port"] == master.addr() {
		return nil
	}
	return c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.port)).Err()
}

// Pause is not the world's on a topology (see Freeze).
func (t *sentinelTopo) Pause(bool) (bool, error) { return true, nil }

// Freeze freezes the master (SIGSTOP); thaw continues it. A pause longer
// than downAfter is failed over by the sentinel while the master is
// frozen: thaw then waits for the switch, and makes the old master the
// new one's replica (see demote).
func (t *sentinelTopo) Freeze(ctx context.Context, _ int) (string, thawFunc, error) {
	if !t.claim() {
		return "", nil, fmt.Errorf("%w: a failover or a pause is under way", errNoFailover)
	}
	m, err := t.master(ctx)
	if err != nil {
		t.unclaim()
		return "", nil, err
	}
	m.freeze(true)
	thaw := func(ctx context.Context) (string, bool, error) {
		defer t.unclaim()
		m.freeze(false)
		// A failover may be under way, or done: wait until the sentinel
		// names a master that says it is one and is not in a failover.
		sc := redis.NewSentinelClient(&redis.Options{Addr: t.sent.addr(), DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
		defer sc.Close()
		var now *rnode
		err := pollUntil(ctx, func() (bool, error) {
			info, err := sc.Master(ctx, sentinelMaster).Result()
			if err != nil || containsWord(info["flags"], "failover_in_progress") {
				return false, nil
			}
			n, err := t.master(ctx)
			if err != nil {
				return false, nil
			}
			c := n.client()
			defer c.Close()
			rep, err := replication(ctx, c)
			now = n
			return err == nil && rep["role"] == "master", nil
		})
		if err != nil {
			return "", false, fmt.Errorf("after the pause: %w", err)
		}
		if now == m {
			return fmt.Sprintf("master %s continued, still the master", m.name), false, nil
		}
		if err := t.demote(ctx, m, now); err != nil {
			return "", true, err
		}
		if err := pollUntil(ctx, func() (bool, error) { return m.replicaOf(ctx, now, probeKey(-1)), nil }); err != nil {
			return "", true, fmt.Errorf("%s not a replica of %s in sync: %w (%s)", m.name, now.name, err, m.describe())
		}
		return fmt.Sprintf("master %s continued; the sentinel had failed it over to %s meanwhile: %s made its replica, in sync", m.name, now.name, m.name), true, nil
	}
	return fmt.Sprintf("master %s (%s) frozen", m.name, m.addr()), thaw, nil
}

func containsWord(list, w string) bool {
	for _, f := range splitComma(list) {
		if f == w {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// Restart is not done on a topology (not in its menu).
func (t *sentinelTopo) Restart(bool) (bool, error) {
	return true, errors.New("no restart of a Sentinel topology")
}

// Flush loses every key: FLUSHALL on the master (the replica follows).
func (t *sentinelTopo) Flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := t.master(ctx)
	if err != nil {
		return err
	}
	c := m.client()
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

func (t *sentinelTopo) Close() {
	for _, n := range append(t.data[:], t.sent) {
		if n != nil {
			n.freeze(false)
			n.kill()
		}
	}
	t.pp.give(t.taken) // the logs stay in the seed's folder
}
