package failover_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testtopo"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestClusterFailoverRedisBackOnce (issue 17, item 2): on a Redis Cluster,
// the master of the shard holding the supervisor's control hash (read at
// every tick) is SIGKILLed. The supervisor finds Redis unreachable once,
// and finds it back once, when the failed shard answers again (its
// replica promoted), not when any node answers a PING: before, it was
// declared back within a probe, lost again at the next tick, and so on
// for the whole failover, the heartbeats' grace counting from each false
// return.
func TestClusterFailoverRedisBackOnce(t *testing.T) {
	gateOnly(t, "cluster-probe")
	c := testtopo.StartCluster(t, clusterPorts, testtopo.ClusterConfig{})
	rdb, err := redisconn.Open(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	store := health.NewStore(rdb, "vigil:", 0)
	var logs testlog.Buffer
	sup, err := supervisor.New(supervisor.Config{
		Host: "p", RedisURL: c.URL, Prefix: "vigil:",
		Lease: 900 * time.Millisecond, OpTimeout: 300 * time.Millisecond,
		Pools:  []supervisor.Pool{{Queue: "probe", Workers: 0, Command: []string{workerBin}}},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sup.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	}()
	sh, err := c.ShardOf(ctx, store.Keys().Control())
	if err != nil {
		t.Fatal(err)
	}
	killed := sh.Master.Kill()
	sw, err := c.WaitPromoted(ctx, sh.Replica)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new master %s after %s", sw.NewMaster.Addr(), sw.Promoted.Sub(killed).Round(time.Millisecond))
	// Back once the shard answers: a few probes after the promotion.
	var down, back []time.Time
	for deadline := time.Now().Add(15 * time.Second); ; {
		down, back = logTimes(t, logs.String(), "redis unreachable"), logTimes(t, logs.String(), "redis reachable again")
		if len(back) > 0 && back[len(back)-1].After(sw.Promoted) || time.Now().After(deadline) {
			break
		}
		<-time.After(50 * time.Millisecond) // polling the supervisor's log
	}
	if len(down) != 1 || len(back) != 1 {
		t.Errorf("%d times unreachable, %d times back during one failover, want once each", len(down), len(back))
	}
	// The promoted replica's ROLE is polled every 5 ms; its slot map may
	// reach the supervisor a moment before.
	for _, at := range back {
		if at.Before(sw.Promoted.Add(-100 * time.Millisecond)) {
			t.Errorf("Redis declared back %s after the kill, %s before the failed shard had a master again",
				at.Sub(killed).Round(time.Millisecond), sw.Promoted.Sub(at).Round(time.Millisecond))
		}
	}
}

// logTimes returns the times of the JSON log lines whose message contains msg.
func logTimes(t *testing.T, log, msg string) []time.Time {
	t.Helper()
	var out []time.Time
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			Time time.Time
			Msg  string
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.Contains(rec.Msg, msg) {
			out = append(out, rec.Time)
		}
	}
	return out
}
