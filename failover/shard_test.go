package failover_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testledger"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testtopo"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestClusterShardFailoverJudgesOthers (issue 17, item 2: availability
// judged per shard). Two supervisors run six workers on a Redis Cluster
// with replicas. The master of shard A (the one holding a worker's keys)
// is SIGKILLed and, right after, a worker whose keys are on another shard
// B is frozen (SIGSTOP): a real hang. B answers all along (until the
// cluster flags A failed, a node timeout later), so that worker is judged
// by its heartbeat as usual: killed within the TTL and a margin, not a
// failover plus a TTL later. The workers on A, which cannot beat while
// their shard has no master, are neither killed nor counted, no host is
// declared lost and the leadership does not move (the failover is shorter
// than the lease).
//
// Before, the supervisor judged Redis as one thing: the first failed call
// to A stopped every heartbeat judgement until every shard answered
// again, and the frozen worker's grace counted from there.
func TestClusterShardFailoverJudgesOthers(t *testing.T) {
	gateOnly(t, "cluster-shard")
	const (
		ttl   = 2500 * time.Millisecond
		lease = 20 * time.Second
	)
	ledgerSrv := testtopo.StartServer(t, ledgerPort)
	lc := redis.NewClient(&redis.Options{Addr: ledgerSrv.Addr()})
	defer lc.Close()
	lr := testledger.NewReader(lc, "ledger:")
	ledgerEnv := map[string]string{testledger.EnvURL: "redis://" + ledgerSrv.Addr() + "/0", testledger.EnvPrefix: lr.Prefix()}
	// A failover takes a node timeout (6 s), the gossip that flags the
	// master failed and an election: longer than the TTL, shorter than the
	// lease. Until the flag every other shard answers (then, as
	// cluster-require-full-coverage is yes, every node refuses keyed
	// commands until the election).
	c := testtopo.StartCluster(t, clusterPorts, testtopo.ClusterConfig{NodeTimeout: 6 * time.Second})
	rdb, err := redisconn.Open(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	store := health.NewStore(rdb, "vigil:", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	hosts := []string{"s1", "s2"}
	logs := make([]*testlog.Buffer, len(hosts))
	for i, h := range hosts {
		logs[i] = &testlog.Buffer{}
		sup, err := supervisor.New(supervisor.Config{
			Host: h, RedisURL: c.URL, Prefix: "vigil:",
			Lease: lease, Capacity: 3, OpTimeout: 300 * time.Millisecond, StopTimeout: 3 * time.Second,
			Heartbeat: supervisor.Heartbeat{Interval: 400 * time.Millisecond, TTL: ttl, StartTimeout: 20 * time.Second},
			Pools:     []supervisor.Pool{{Queue: "sh", Workers: 6, Command: []string{workerBin}, Env: ledgerEnv}},
			Logger:    slog.New(slog.NewJSONHandler(logs[i], nil)),
		}, store)
		if err != nil {
			t.Fatal(err)
		}
		if err := sup.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := sup.Stop(ctx); err != nil {
				t.Errorf("Stop %s: %v", h, err)
			}
			if t.Failed() {
				t.Logf("supervisor %s log:\n%s", h, logs[i].String())
			}
			if dir := os.Getenv(envLogs); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, "cluster-shard-"+h+".log"), []byte(logs[i].String()), 0o644)
			}
		}()
	}

	// Six healthy workers, three a host (capacity 3: no rebalancing to
	// come).
	var recs []health.Component
	for deadline := time.Now().Add(60 * time.Second); ; {
		ids := make([]health.ComponentID, 6)
		for i := range ids {
			ids[i] = health.ComponentID{Queue: "sh", Slot: i}
		}
		recs, err = store.GetMany(ctx, ids)
		healthy, perHost := 0, map[string]int{}
		for _, r := range recs {
			if err == nil && r.Status == health.StatusHealthy && r.PID > 0 {
				healthy++
				perHost[r.Host]++
			}
		}
		if healthy == len(ids) && perHost["s1"] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 6 workers healthy after 60 s", healthy)
		}
		<-time.After(100 * time.Millisecond) // polling Redis
	}
	shards := map[string][]health.Component{} // master addr → workers
	var a testtopo.Shard
	for _, r := range recs {
		sh, err := c.ShardOf(ctx, store.Keys().Heartbeat(r.ID))
		if err != nil {
			t.Fatal(err)
		}
		shards[sh.Master.Addr()] = append(shards[sh.Master.Addr()], r)
		if a.Master == nil {
			a = sh
		}
	}
	onA := shards[a.Master.Addr()]
	var frozen health.Component
	for addr, ws := range shards {
		if addr != a.Master.Addr() {
			frozen = ws[0]
			break
		}
	}
	if frozen.PID == 0 {
		t.Fatalf("every worker's keys are on one shard (%s)", a.Master.Addr())
	}
	restarts0 := map[health.ComponentID]int{}
	for _, r := range recs {
		restarts0[r.ID] = r.Restarts.RestartCount
	}
	leadership0 := countLines(logs, "leadership changed")

	killed := a.Master.Kill()
	promoted := make(chan testtopo.Switch, 1)
	go func() {
		sw, err := c.WaitPromoted(ctx, a.Replica)
		if err != nil {
			t.Errorf("WaitPromoted: %v", err)
		}
		promoted <- sw
	}()
	if err := syscall.Kill(frozen.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer syscall.Kill(frozen.PID, syscall.SIGCONT)
	t.Logf("killed the master %s of %d workers' shard; froze %s (pid %d, host %s)",
		a.Master.Addr(), len(onA), frozen.ID, frozen.PID, frozen.Host)

	// Judged hung: its supervisor kills it.
	var hung time.Time
	for deadline := stopped.Add(30 * time.Second); hung.IsZero() && time.Now().Before(deadline); {
		for _, l := range logs {
			if at := killTimes(t, l.String(), frozen.ID.String()); len(at) > 0 {
				hung = at[0]
			}
		}
		<-time.After(50 * time.Millisecond) // polling the supervisors' logs
	}
	sw := <-promoted
	t.Logf("RESULT cluster-shard: frozen worker on another shard killed %s after SIGSTOP (ttl %s); new master %s after the kill",
		hung.Sub(stopped).Round(time.Millisecond), ttl, sw.Promoted.Sub(killed).Round(time.Millisecond))
	switch {
	case hung.IsZero():
		t.Fatalf("the frozen worker %s was not killed within 30 s", frozen.ID)
	case hung.Sub(stopped) > ttl+2*time.Second:
		t.Errorf("the frozen worker %s (a healthy shard) was killed %s after SIGSTOP, want within the TTL (%s) + 2 s: judged as if its shard failed over",
			frozen.ID, hung.Sub(stopped).Round(time.Millisecond), ttl)
	}

	// The workers of the failed shard: a TTL past its return, none killed.
	<-time.After(time.Until(sw.Announced.Add(ttl + 2*time.Second)))
	for _, l := range logs {
		for _, w := range onA {
			if at := killTimes(t, l.String(), w.ID.String()); len(at) > 0 {
				t.Errorf("%s (on the failed shard) killed at +%s", w.ID, at[0].Sub(killed).Round(time.Millisecond))
			}
		}
	}
	ids := make([]health.ComponentID, 0, len(onA))
	for _, w := range onA {
		ids = append(ids, w.ID)
	}
	after, err := store.GetMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range after {
		if r.Restarts.RestartCount != restarts0[r.ID] || r.PID != pidOf(onA, r.ID) {
			t.Errorf("%s (on the failed shard): restart_count %d→%d, pid %d→%d", r.ID, restarts0[r.ID], r.Restarts.RestartCount, pidOf(onA, r.ID), r.PID)
		}
	}
	if n := countLines(logs, "host lost"); n > 0 {
		t.Errorf("%d hosts declared lost during a failover shorter than the lease", n)
	}
	if n := countLines(logs, "leadership changed") - leadership0; n > 0 {
		t.Errorf("the leadership changed %d times during a failover shorter than the lease", n)
	}
}

// killTimes are the times the log says the monitor killed component id.
func killTimes(t *testing.T, log, id string) []time.Time {
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"component":"`+id+`"`) {
			lines = append(lines, l)
		}
	}
	return logTimes(t, strings.Join(lines, "\n"), "killing worker")
}

func countLines(logs []*testlog.Buffer, msg string) int {
	n := 0
	for _, l := range logs {
		n += strings.Count(l.String(), `"msg":"`+msg)
	}
	return n
}

func pidOf(ws []health.Component, id health.ComponentID) int {
	for _, w := range ws {
		if w.ID == id {
			return w.PID
		}
	}
	return 0
}
