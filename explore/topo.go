package explore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A replicated Redis under test (-redis sentinel, -redis cluster): the
// hosts and their workers reach it by its URL, as an operator's would
// (redis-sentinel://, redis-cluster://), with no fault proxy in between:
// its faults are its own (failovers, a frozen master, a flush), not the
// proxies' (outages, partitions, lost replies are not in these modes'
// menu, see menuFor).
type topology interface {
	backend
	// URL is Vigil's Redis URL of the topology.
	URL() string
	// Failover begins a failover of the master of shard (Cluster: one of
	// three; Sentinel: the only one): a manual one (SENTINEL FAILOVER,
	// CLUSTER FAILOVER on the replica), or a SIGKILL of the master (kill).
	// It refuses (errNoFailover) when the shard has no replica in sync or
	// another failover is under way: then nothing was done.
	Failover(ctx context.Context, shard int, kill bool) (*failover, error)
	// Freeze SIGSTOPs the master of shard (redis-pause); thaw continues it
	// and, if it was failed over meanwhile, waits until it is the new
	// master's replica in sync. It refuses as Failover does.
	Freeze(ctx context.Context, shard int) (desc string, thaw thawFunc, err error)
}

// thawFunc continues a frozen master; failedOver says it lost its place
// meanwhile.
type thawFunc func(ctx context.Context) (desc string, failedOver bool, err error)

var errNoFailover = errors.New("no failover now")

// failover is one under way.
type failover struct {
	desc string // what was done
	// switched waits until the shard has its new master (and the clients
	// can find it: the sentinel names it, or every node of the Cluster
	// says cluster_state:ok).
	switched func(ctx context.Context) (string, error)
	// rejoin starts the killed master again, as a replica of the new one
	// (kill), or makes the old master the new one's replica (manual), and
	// waits until it is in sync; the failover is over then.
	rejoin func(ctx context.Context) (string, error)
}

// rnode is one redis-server process of a topology (a data node or a
// sentinel), stopped by its pid.
type rnode struct {
	name string
	port int
	dir  string
	args []string // the process's, without the ones of a start

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	stop bool // SIGSTOPped now
}

func (n *rnode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

func (n *rnode) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 2})
}

// start runs the process (extra arguments for this run only) and waits
// until it answers a PING.
func (n *rnode) start(extra ...string) error {
	log, err := os.OpenFile(filepath.Join(n.dir, n.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("redis-server", append(append([]string(nil), n.args...), extra...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = n.dir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done, n.stop = cmd, done, false
	n.mu.Unlock()
	c := n.client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start (port %d taken?), see %s", n.name, n.port, filepath.Join(n.dir, n.name+".log"))
		case <-time.After(20 * time.Millisecond): // polling another process
		}
		if time.Now().After(deadline) {
			n.kill()
			return fmt.Errorf("%s did not answer within 10s", n.name)
		}
	}
}

// alive reports whether the process runs (frozen or not).
func (n *rnode) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// kill SIGKILLs the process and waits until it is reaped.
func (n *rnode) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// freeze SIGSTOPs (true) or SIGCONTs the process; false if it is not
// running.
func (n *rnode) freeze(on bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	n.stop = on
	return n.cmd.Process.Signal(sig) == nil
}

// replication reads INFO replication as a map.
func replication(ctx context.Context, c *redis.Client) (map[string]string, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// replicaOf reports whether n is a replica of master in sync with it: it
// says its link is up, and it has the master's writes up to a probe
// written now (to key, which master serves), within 300 ms. Its link
// says "up" as soon as it loaded the master's copy, but Redis 7 streams
// the writes made since only after the replica's first acknowledgement,
// up to a second later, and INFO calls it "online" meanwhile: a master
// killed or failed over in that second takes them along, and a topology
// that took "up" or "online" for in sync would see every job enqueued
// before the failover vanish (a false alarm of the explorer's; its replay
// list, explore/testdata/seeds.txt, holds it).
func (n *rnode) replicaOf(ctx context.Context, master *rnode, key string) bool {
	c := n.client()
	defer c.Close()
	m, err := replication(ctx, c)
	if err != nil || m["role"] != "slave" || m["master_link_status"] != "up" || m["master_host"]+":"+m["master_port"] != master.addr() {
		return false
	}
	mc := master.client()
	defer mc.Close()
	if err := mc.Incr(ctx, key).Err(); err != nil {
		return false
	}
	mm, err := replication(ctx, mc)
	if err != nil {
		return false
	}
	want, err := strconv.ParseInt(mm["master_repl_offset"], 10, 64)
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	return pollUntil(pctx, func() (bool, error) {
		m, err := replication(pctx, c)
		if err != nil {
			return false, nil
		}
		got, err := strconv.ParseInt(m["slave_repl_offset"], 10, 64)
		return err == nil && got >= want, nil
	}) == nil
}

// probeKey is the key replicaOf writes on a master: on a Cluster, one of
// the slot range of the shard whose first slot is slot (-1: any key).
func probeKey(slot int) string {
	if slot < 0 {
		return "explore:probe"
	}
	for k := 0; ; k++ {
		key := "explore:probe:{" + strconv.Itoa(k) + "}"
		if s := keySlot(strconv.Itoa(k)); s >= slot && s < slot+5461 {
			return key
		}
	}
}

// keySlot is Redis Cluster's slot of a hash tag (CRC16/XMODEM mod 16384).
func keySlot(tag string) int {
	crc := uint16(0)
	for _, b := range []byte(tag) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// pollUntil calls f every 20 ms until it returns true, an error it wants
// returned (fatal), or ctx ends.
func pollUntil(ctx context.Context, f func() (bool, error)) error {
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling other processes
		}
	}
}

// frozen reports whether the process is SIGSTOPped now.
func (n *rnode) frozen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && n.stop
}

// describe says what n says of its replication, for an error.
func (n *rnode) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := n.client()
	defer c.Close()
	m, err := replication(ctx, c)
	if err != nil {
		return n.name + ": " + err.Error()
	}
	return fmt.Sprintf("%s: role %s, master %s:%s, link %s, sync in progress %s", n.name, m["role"], m["master_host"], m["master_port"],
		m["master_link_status"], m["master_sync_in_progress"])
}
