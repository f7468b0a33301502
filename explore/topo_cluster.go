package explore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cluster topology: 3 masters with a replica each (redis-cli --cluster
// create), the bus ports taken from the same range as the nodes'.
const (
	clusterSize = 6
	// nodeTimeout is cluster-node-timeout: a master that does not answer
	// this long is failed over (a SIGKILL, or a pause this long).
	nodeTimeout = 2 * time.Second
)

// shardSlots names each shard by a slot of its range (redis-cli gives
// the three masters 0-5460, 5461-10922, 10923-16383).
var shardSlots = [3]int{0, 5461, 10923}

type clusterTopo struct {
	pp    *ports
	taken []int
	dir   string
	nodes []*rnode

	mu   sync.Mutex
	busy bool // a failover or a pause is under way
}

func newClusterTopo(pp *ports, parent string) (*clusterTopo, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("redis-cli not installed (Debian: apt-get install redis-tools)")
	}
	ps, err := pp.take(2 * clusterSize)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "cluster-")
	if err != nil {
		pp.give(ps)
		return nil, err
	}
	t := &clusterTopo{pp: pp, taken: ps, dir: dir}
	var addrs []string
	for i := range clusterSize {
		port, bus := ps[i], ps[clusterSize+i]
		n := &rnode{name: "node" + strconv.Itoa(i), port: port, dir: dir, args: []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--dbfilename", "dump-" + strconv.Itoa(port) + ".rdb",
			"--repl-diskless-sync-delay", "0", "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10)}}
		t.nodes = append(t.nodes, n)
		addrs = append(addrs, n.addr())
		if err := n.start(); err != nil {
			t.Close()
			return nil, err
		}
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.waitSettled(ctx); err != nil {
		t.Close()
		return nil, fmt.Errorf("cluster not ready: %w", err)
	}
	return t, nil
}

func (t *clusterTopo) URL() string {
	addrs := make([]string, len(t.nodes))
	for i, n := range t.nodes {
		addrs[i] = n.addr()
	}
	return "redis-cluster://" + strings.Join(addrs, ",")
}

func (t *clusterTopo) Addr() string { return t.nodes[0].addr() }

// cnode is one line of CLUSTER NODES.
type cnode struct {
	id, addr, master string
	isMaster, failed bool
	slots            [][2]int
}

func parseClusterNodes(text string) []cnode {
	var out []cnode
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := cnode{id: f[0], addr: addr, master: f[3], isMaster: strings.Contains(f[2], "master"),
			failed: strings.Contains(f[2], "fail")}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out
}

func (t *clusterTopo) byAddr(addr string) *rnode {
	for _, n := range t.nodes {
		if n.addr() == addr {
			return n
		}
	}
	return nil
}

// view is what one node says of the cluster: its state and its nodes.
func (t *clusterTopo) view(ctx context.Context, n *rnode) (ok bool, nodes []cnode, err error) {
	c := n.client()
	defer c.Close()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return false, nil, err
	}
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return false, nil, err
	}
	return strings.Contains(info, "cluster_state:ok"), parseClusterNodes(text), nil
}

// shard is the master of shard i and its replica, as the first live node
// that answers sees them (replica nil if it has none).
func (t *clusterTopo) shard(ctx context.Context, i int) (master, replica *rnode, err error) {
	for _, n := range t.nodes {
		if !n.alive() || n.frozen() {
			continue
		}
		_, ns, err := t.view(ctx, n)
		if err != nil {
			continue
		}
		for _, m := range ns {
			if !m.isMaster || m.failed || !hasSlot(m.slots, shardSlots[i]) {
				continue
			}
			master = t.byAddr(m.addr)
			for _, r := range ns {
				if r.master == m.id && !r.failed {
					replica = t.byAddr(r.addr)
				}
			}
			if master == nil {
				return nil, nil, fmt.Errorf("shard %d: master %s is no node of ours", i, m.addr)
			}
			return master, replica, nil
		}
		return nil, nil, fmt.Errorf("shard %d: no master serves slot %d (as %s sees it)", i, shardSlots[i], n.name)
	}
	return nil, nil, errors.New("no node answers CLUSTER NODES")
}

func hasSlot(ranges [][2]int, slot int) bool {
	for _, r := range ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// waitSettled waits until every live node says cluster_state:ok and knows
// the shards' masters alike, and every shard's replica is in sync.
func (t *clusterTopo) waitSettled(ctx context.Context) error {
	var last string
	err := pollUntil(ctx, func() (bool, error) {
		var masters []string
		for _, n := range t.nodes {
			if !n.alive() {
				continue
			}
			ok, ns, err := t.view(ctx, n)
			if err != nil || !ok {
				last = fmt.Sprintf("%s: cluster_state not ok (%v)", n.name, err)
				return false, nil
			}
			var ms []string
			for i := range shardSlots {
				for _, m := range ns {
					if m.isMaster && !m.failed && hasSlot(m.slots, shardSlots[i]) {
						ms = append(ms, m.addr)
					}
				}
			}
			if masters == nil {
				masters = ms
			} else if strings.Join(ms, " ") != strings.Join(masters, " ") {
				last = fmt.Sprintf("%s sees masters %v, another %v", n.name, ms, masters)
				return false, nil
			}
		}
		for i := range shardSlots {
			m, r, err := t.shard(ctx, i)
			if err != nil || r == nil || !r.replicaOf(ctx, m, probeKey(shardSlots[i])) {
				last = fmt.Sprintf("shard %d: no replica in sync (%v)", i, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, last)
	}
	return nil
}

// claim takes the topology for one failover or pause at a time, whatever
// the shard: a replica is promoted by the votes of a majority of the
// masters, and two of three masters down at once elect nobody: two
// failovers at once would kill two masters and wait for an election that
// never comes (the explorer's replay list, explore/testdata/seeds.txt,
// holds it).
func (t *clusterTopo) claim(int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy {
		return false
	}
	t.busy = true
	return true
}

func (t *clusterTopo) unclaim(int) {
	t.mu.Lock()
	t.busy = false
	t.mu.Unlock()
}

// promoted waits until r says it is a master and every live node says
// cluster_state:ok and names r the master of shard i.
func (t *clusterTopo) promoted(ctx context.Context, i int, r *rnode) error {
	return pollUntil(ctx, func() (bool, error) {
		c := r.client()
		info, err := replication(ctx, c)
		c.Close()
		if err != nil || info["role"] != "master" {
			return false, nil
		}
		for _, n := range t.nodes {
			if !n.alive() || n.frozen() {
				continue
			}
			ok, ns, err := t.view(ctx, n)
			if err != nil || !ok {
				return false, nil
			}
			named := false
			for _, m := range ns {
				named = named || m.isMaster && !m.failed && m.addr == r.addr() && hasSlot(m.slots, shardSlots[i])
			}
			if !named {
				return false, nil
			}
		}
		return true, nil
	})
}

func (t *clusterTopo) Failover(ctx context.Context, i int, kill bool) (*failover, error) {
	i %= len(shardSlots)
	if !t.claim(i) {
		return nil, fmt.Errorf("%w: a failover or a pause (of any shard) is under way", errNoFailover)
	}
	m, r, err := t.shard(ctx, i)
	if err == nil && (r == nil || !r.replicaOf(ctx, m, probeKey(shardSlots[i]))) {
		err = fmt.Errorf("shard %d has no replica in sync", i)
	}
	if err != nil {
		t.unclaim(i)
		return nil, fmt.Errorf("%w: %v", errNoFailover, err)
	}
	f := &failover{}
	if kill {
		m.kill()
		f.desc = fmt.Sprintf("shard %d's master %s (%s) SIGKILLed, %s its replica", i, m.name, m.addr(), r.name)
	} else {
		c := r.client()
		err := c.Do(ctx, "CLUSTER", "FAILOVER").Err()
		c.Close()
		if err != nil {
			t.unclaim(i)
			return nil, fmt.Errorf("%w: CLUSTER FAILOVER on %s: %v", errNoFailover, r.name, err)
		}
		f.desc = fmt.Sprintf("CLUSTER FAILOVER on %s, the replica of shard %d's master %s (%s)", r.name, i, m.name, m.addr())
	}
	f.switched = func(ctx context.Context) (string, error) {
		began := time.Now()
		if err := t.promoted(ctx, i, r); err != nil {
			return "", fmt.Errorf("%s not the master of shard %d everywhere within %s: %w", r.name, i, switchWithin, err)
		}
		return fmt.Sprintf("%s (%s) is shard %d's master on every node %s after", r.name, r.addr(), i, time.Since(began).Round(time.Millisecond)), nil
	}
	f.rejoin = func(ctx context.Context) (string, error) {
		defer t.unclaim(i)
		if kill {
			if err := m.start(); err != nil { // its nodes.conf makes it rejoin
				return "", err
			}
		}
		began := time.Now()
		if err := pollUntil(ctx, func() (bool, error) { return m.replicaOf(ctx, r, probeKey(shardSlots[i])), nil }); err != nil {
			return "", fmt.Errorf("%s not a replica of %s in sync: %w (%s)", m.name, r.name, err, m.describe())
		}
		return fmt.Sprintf("%s is a replica of %s in sync (%s)", m.name, r.name, time.Since(began).Round(time.Millisecond)), nil
	}
	return f, nil
}

// Pause is not the world's on a topology (see Freeze).
func (t *clusterTopo) Pause(bool) (bool, error) { return true, nil }

// Freeze freezes shard i's master (SIGSTOP); thaw continues it. A pause
// longer than nodeTimeout is failed over meanwhile: the old master learns
// it from the cluster and turns replica by itself; thaw waits for that.
func (t *clusterTopo) Freeze(ctx context.Context, i int) (string, thawFunc, error) {
	i %= len(shardSlots)
	if !t.claim(i) {
		return "", nil, fmt.Errorf("%w: a failover or a pause (of any shard) is under way", errNoFailover)
	}
	m, _, err := t.shard(ctx, i)
	if err != nil {
		t.unclaim(i)
		return "", nil, err
	}
	m.freeze(true)
	thaw := func(ctx context.Context) (string, bool, error) {
		defer t.unclaim(i)
		m.freeze(false)
		var now *rnode
		err := pollUntil(ctx, func() (bool, error) {
			var err error
			now, _, err = t.shard(ctx, i)
			if err != nil {
				return false, nil
			}
			if now == m {
				return true, nil
			}
			return t.promoted(ctx, i, now) == nil && m.replicaOf(ctx, now, probeKey(shardSlots[i])), nil
		})
		if err != nil {
			return "", false, fmt.Errorf("after the pause of shard %d: %w", i, err)
		}
		if now == m {
			return fmt.Sprintf("%s continued, still shard %d's master", m.name, i), false, nil
		}
		return fmt.Sprintf("%s continued; the cluster had failed it over to %s meanwhile: %s its replica, in sync", m.name, now.name, m.name), true, nil
	}
	return fmt.Sprintf("shard %d's master %s (%s) frozen", i, m.name, m.addr()), thaw, nil
}

// Restart is not done on a topology (not in its menu).
func (t *clusterTopo) Restart(bool) (bool, error) {
	return true, errors.New("no restart of a Cluster topology")
}

// Flush loses every key: FLUSHALL on every master.
func (t *clusterTopo) Flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for i := range shardSlots {
		m, _, err := t.shard(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c := m.client()
		errs = append(errs, c.FlushAll(ctx).Err())
		c.Close()
	}
	return errors.Join(errs...)
}

func (t *clusterTopo) Close() {
	for _, n := range t.nodes {
		n.freeze(false)
		n.kill()
	}
	t.pp.give(t.taken) // the logs stay in the seed's folder
}
