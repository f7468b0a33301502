package testtopo

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterSize is how many nodes StartCluster starts: 3 masters, 3 replicas.
const ClusterSize = 6

// ClusterConfig tunes StartCluster; zero values take the defaults.
type ClusterConfig struct {
	// NodeTimeout is cluster-node-timeout: how long a master must not
	// answer before it is failed over; default 2 s.
	NodeTimeout time.Duration
	// NodeArgs are extra redis-server arguments of every node.
	NodeArgs []string
}

// Cluster is a Redis Cluster of 3 masters with one replica each.
type Cluster struct {
	Nodes []*Proc
	// URL is Vigil's redis-cluster:// URL (every node as a seed).
	URL string
}

// StartCluster starts ClusterSize nodes on ports (their bus ports are
// port+10000), creates the cluster with one replica per master, and waits
// until every node says cluster_state:ok and every replica is in sync.
func StartCluster(tb testing.TB, ports []int, cfg ClusterConfig) *Cluster {
	tb.Helper()
	need(tb, "redis-server", "redis-cli")
	if len(ports) != ClusterSize {
		tb.Fatalf("StartCluster: %d ports, want %d", len(ports), ClusterSize)
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 2 * time.Second
	}
	dir := tb.TempDir()
	c := &Cluster{}
	var addrs []string
	for i, port := range ports {
		p := newProc(tb, dir, "node"+strconv.Itoa(i), port, append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
			"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10)}, cfg.NodeArgs...)...)
		p.start(tb)
		c.Nodes = append(c.Nodes, p)
		addrs = append(addrs, p.Addr())
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		tb.Fatalf("cluster not ready: %v", err)
	}
	c.URL = "redis-cluster://" + strings.Join(addrs, ",")
	return c
}

// waitReady waits until every node says cluster_state:ok and knows every
// node, and every replica's link to its master is up.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, p := range c.Nodes {
		cl := p.Client()
		err := poll(ctx, func() (bool, error) {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(ClusterSize)) {
				return false, fmt.Errorf("%s: %s", p.Addr(), strings.Join(strings.Fields(info)[:3], " "))
			}
			rep, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			if strings.Contains(rep, "role:slave") && !strings.Contains(rep, "master_link_status:up") {
				return false, fmt.Errorf("%s: replica not in sync", p.Addr())
			}
			return true, nil
		})
		cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, master string
	isMaster, failed bool
	slots            [][2]int
}

func (c *Cluster) nodes(ctx context.Context) ([]node, error) {
	var last error
	for _, p := range c.Nodes {
		if p.PID() == 0 {
			continue
		}
		cl := p.Client()
		text, err := cl.ClusterNodes(ctx).Result()
		cl.Close()
		if err != nil {
			last = err
			continue
		}
		return parseNodes(text), nil
	}
	return nil, fmt.Errorf("no node answers CLUSTER NODES: %v", last)
}

func parseNodes(text string) []node {
	var out []node
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := node{id: f[0], addr: addr, master: f[3], isMaster: strings.Contains(f[2], "master"),
			failed: strings.Contains(f[2], "fail")}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated
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

// Shard is a master and its replica.
type Shard struct{ Master, Replica *Proc }

// ShardOf returns the shard that holds key now.
func (c *Cluster) ShardOf(ctx context.Context, key string) (Shard, error) {
	var slot int64 = -1
	for _, p := range c.Nodes {
		if p.PID() == 0 {
			continue
		}
		cl := p.Client()
		s, err := cl.ClusterKeySlot(ctx, key).Result()
		cl.Close()
		if err == nil {
			slot = s
			break
		}
	}
	if slot < 0 {
		return Shard{}, fmt.Errorf("no node answers CLUSTER KEYSLOT")
	}
	ns, err := c.nodes(ctx)
	if err != nil {
		return Shard{}, err
	}
	byAddr := map[string]*Proc{}
	for _, p := range c.Nodes {
		byAddr[p.Addr()] = p
	}
	for _, n := range ns {
		if !n.isMaster {
			continue
		}
		for _, r := range n.slots {
			if int(slot) < r[0] || int(slot) > r[1] {
				continue
			}
			sh := Shard{Master: byAddr[n.addr]}
			for _, m := range ns {
				if m.master == n.id && !m.failed {
					sh.Replica = byAddr[m.addr]
				}
			}
			if sh.Master == nil || sh.Replica == nil {
				return Shard{}, fmt.Errorf("slot %d: master %s has no live replica", slot, n.addr)
			}
			return sh, nil
		}
	}
	return Shard{}, fmt.Errorf("slot %d is served by no master", slot)
}

// WaitPromoted waits until replica says it is a master and the cluster
// says cluster_state:ok on it; Promoted is the first, Announced the
// second.
func (c *Cluster) WaitPromoted(ctx context.Context, replica *Proc) (Switch, error) {
	sw := Switch{NewMaster: replica}
	cl := replica.Client()
	defer cl.Close()
	err := poll(ctx, func() (bool, error) {
		now := time.Now()
		if sw.Promoted.IsZero() {
			if r, err := replica.Role(ctx); err == nil && r == "master" {
				sw.Promoted = now
			}
		}
		if !sw.Promoted.IsZero() && sw.Announced.IsZero() {
			if info, err := cl.ClusterInfo(ctx).Result(); err == nil && strings.Contains(info, "cluster_state:ok") {
				sw.Announced = now
			}
		}
		return !sw.Announced.IsZero(), nil
	})
	return sw, err
}

// Uncover takes an empty slot of the first master's ranges away from
// every node (CLUSTER DELSLOTS on each), as an operator's mistake or a
// half-done resharding would: with cluster-require-full-coverage yes (the
// default) every node then answers CLUSTERDOWN to every command with a key.
// It returns the slot, its owner, and when the first node said
// cluster_state:fail.
func (c *Cluster) Uncover(ctx context.Context) (slot int, owner *Proc, at time.Time, err error) {
	ns, err := c.nodes(ctx)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	for _, n := range ns {
		if n.isMaster && len(n.slots) > 0 {
			for _, p := range c.Nodes {
				if p.Addr() == n.addr {
					owner = p
				}
			}
			oc := owner.Client()
			for slot = n.slots[0][0]; slot <= n.slots[0][1]; slot++ {
				if k, err := oc.ClusterCountKeysInSlot(ctx, slot).Result(); err == nil && k == 0 {
					break
				}
			}
			oc.Close()
			break
		}
	}
	if owner == nil {
		return 0, nil, time.Time{}, fmt.Errorf("no master with slots")
	}
	for _, p := range c.Nodes {
		cl := p.Client()
		err := cl.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err()
		cl.Close()
		if err != nil {
			return slot, owner, time.Time{}, fmt.Errorf("%s: CLUSTER DELSLOTS %d: %w", p.Addr(), slot, err)
		}
	}
	oc := owner.Client()
	defer oc.Close()
	err = poll(ctx, func() (bool, error) {
		info, err := oc.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:fail"), err
	})
	return slot, owner, time.Now(), err
}

// Cover gives slot back to owner (CLUSTER ADDSLOTS) and returns when every
// node says cluster_state:ok again.
func (c *Cluster) Cover(ctx context.Context, slot int, owner *Proc) (time.Time, error) {
	oc := owner.Client()
	err := oc.Do(ctx, "CLUSTER", "ADDSLOTS", slot).Err()
	oc.Close()
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: CLUSTER ADDSLOTS %d: %w", owner.Addr(), slot, err)
	}
	for _, p := range c.Nodes {
		cl := p.Client()
		err := poll(ctx, func() (bool, error) {
			info, err := cl.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok"), err
		})
		cl.Close()
		if err != nil {
			return time.Time{}, fmt.Errorf("%s not ok again: %w", p.Addr(), err)
		}
	}
	return time.Now(), nil
}
