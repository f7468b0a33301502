package testredis

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodes is how many masters StartCluster starts.
const ClusterNodes = 3

// Cluster is a local Redis Cluster of the test's own: ClusterNodes
// redis-server processes on loopback ports, slots spread by
// `redis-cli --cluster create`, no replicas.
type Cluster struct {
	Ports []int
	// URL is the cluster's redis-cluster:// URL (internal/redisconn).
	URL   string
	procs []*exec.Cmd
}

// StartCluster starts a 3-node Redis Cluster (about 7 s) and stops it when
// the test ends. It runs only in the integration suite (make test-redis,
// VIGIL_TEST_REDIS_URL set), and skips when redis-server or redis-cli is
// missing.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if !Real() {
		tb.Skipf("a local Redis Cluster test: runs in the integration suite only (set %s, make test-redis)", EnvURL)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("%s not installed: cannot start a local Redis Cluster (apt-get install redis-server redis-tools)", bin)
		}
	}
	c := &Cluster{}
	tb.Cleanup(c.stop)
	dir := tb.TempDir()
	var addrs, hosts []string
	taken := map[int]bool{}
	for range ClusterNodes {
		port := clusterPort(tb, taken)
		p := strconv.Itoa(port)
		cmd := exec.Command("redis-server", "--port", p, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-"+p+".conf", "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", dir, "--dbfilename", "dump-"+p+".rdb")
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start redis-server --cluster-enabled on %s: %v", p, err)
		}
		c.procs = append(c.procs, cmd)
		c.Ports = append(c.Ports, port)
		addrs = append(addrs, "127.0.0.1:"+p)
	}
	for _, a := range addrs {
		waitPing(tb, a)
		hosts = append(hosts, a)
	}
	args := append([]string{"--cluster", "create"}, hosts...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		waitClusterOK(tb, a)
	}
	c.URL = "redis-cluster://" + strings.Join(addrs, ",")
	return c
}

// clusterPort finds a free port whose cluster bus port (+10000) is free too.
// Ports in taken (and their bus ports) are not returned; the one returned
// is added.
func clusterPort(tb testing.TB, taken map[int]bool) int {
	tb.Helper()
	for range 100 {
		p := FreePort(tb)
		if p+10000 > 65535 || taken[p] || taken[p+10000] || taken[p-10000] {
			continue
		}
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			l.Close()
			taken[p], taken[p+10000] = true, true
			return p
		}
	}
	tb.Fatal("no free port pair for a cluster node")
	return 0
}

func waitPing(tb testing.TB, addr string) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("cluster node %s did not answer: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process, not a goroutine
	}
}

// waitClusterOK waits until the node says cluster_state:ok and knows every
// node.
func waitClusterOK(tb testing.TB, addr string) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(ClusterNodes)) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("cluster node %s not ready: %v\n%s", addr, err, info)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process, not a goroutine
	}
}

func (c *Cluster) stop() {
	for _, p := range c.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	c.procs = nil
}
