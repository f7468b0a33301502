package testtopo

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinel knows the master by.
const MasterName = "vigil"

// SentinelPorts are the ports of a Sentinel topology.
type SentinelPorts struct{ Master, Replica, Sentinel int }

// SentinelConfig tunes StartSentinel; zero values take the defaults.
type SentinelConfig struct {
	// DownAfter is how long the master must not answer before the sentinel
	// fails it over (down-after-milliseconds); default 1 s.
	DownAfter time.Duration
	// MasterArgs are extra redis-server arguments of both data nodes
	// (e.g. "--min-replicas-to-write", "1").
	MasterArgs []string
}

// Sentinel is a master, a replica and a sentinel.
type Sentinel struct {
	Master, Replica, Sentinel *Proc
	// URL is Vigil's redis-sentinel:// URL (database 0).
	URL string
}

// StartSentinel starts the three processes on ports and waits until the
// replica is in sync and the sentinel knows both. Everything is stopped
// when the test ends.
func StartSentinel(tb testing.TB, ports SentinelPorts, cfg SentinelConfig) *Sentinel {
	tb.Helper()
	need(tb, "redis-server")
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = time.Second
	}
	dir := tb.TempDir()
	s := &Sentinel{}
	s.Master = newProc(tb, dir, "master", ports.Master, cfg.MasterArgs...)
	s.Replica = newProc(tb, dir, "replica", ports.Replica,
		append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(ports.Master)}, cfg.MasterArgs...)...)
	s.Master.start(tb)
	s.Replica.start(tb)
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s 10000\n"+
		"sentinel parallel-syncs %s 1\n",
		ports.Sentinel, dir, MasterName, ports.Master, MasterName, cfg.DownAfter.Milliseconds(), MasterName, MasterName)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	s.Sentinel = &Proc{Port: ports.Sentinel, Name: "sentinel", dir: dir, args: []string{conf, "--sentinel"}}
	tb.Cleanup(s.Sentinel.stop)
	s.Sentinel.start(tb)
	s.URL = "redis-sentinel://" + s.Sentinel.Addr() + "/" + MasterName + "/0"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.waitSynced(ctx); err != nil {
		tb.Fatalf("sentinel topology not ready: %v", err)
	}
	return s
}

// waitSynced waits until the replica's link is up and the sentinel lists it.
func (s *Sentinel) waitSynced(ctx context.Context) error {
	sc := s.Sentinel.Client()
	defer sc.Close()
	rc := s.Replica.Client()
	defer rc.Close()
	return poll(ctx, func() (bool, error) {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		if !contains(info, "master_link_status:up") {
			return false, fmt.Errorf("replica link not up")
		}
		reps, err := sc.Do(ctx, "SENTINEL", "REPLICAS", MasterName).Slice()
		if err != nil {
			return false, err
		}
		return len(reps) == 1, fmt.Errorf("sentinel knows %d replicas", len(reps))
	})
}

// MasterAddr is the master's address according to the sentinel.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr(), DialTimeout: 200 * time.Millisecond})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// Failover asks the sentinel for a manual failover (SENTINEL FAILOVER) and
// returns when it was sent.
func (s *Sentinel) Failover(ctx context.Context) (time.Time, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr()})
	defer sc.Close()
	at := time.Now()
	return at, sc.Failover(ctx, MasterName).Err()
}

// Switch is when a failover's new master took over.
type Switch struct {
	NewMaster *Proc
	// Promoted is when the new master first answered ROLE master;
	// Announced when the sentinel first named it (clients that ask the
	// sentinel can find it from then on).
	Promoted, Announced time.Time
}

// WaitNewMaster waits until the sentinel names the replica as master, and
// the replica says it is one.
func (s *Sentinel) WaitNewMaster(ctx context.Context) (Switch, error) {
	sw := Switch{NewMaster: s.Replica}
	err := poll(ctx, func() (bool, error) {
		now := time.Now()
		if sw.Promoted.IsZero() {
			if r, err := s.Replica.Role(ctx); err == nil && r == "master" {
				sw.Promoted = now
			}
		}
		if sw.Announced.IsZero() {
			if a, err := s.MasterAddr(ctx); err == nil && a == s.Replica.Addr() {
				sw.Announced = now
			}
		}
		return !sw.Promoted.IsZero() && !sw.Announced.IsZero(), nil
	})
	return sw, err
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
