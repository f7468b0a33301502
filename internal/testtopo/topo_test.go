package testtopo

import (
	"context"
	"os"
	"testing"
	"time"
)

// The harness's own tests start real topologies: they run in the failover
// suite only (make test-failover sets VIGIL_FAILOVER).
func gate(t *testing.T) {
	t.Helper()
	if os.Getenv("VIGIL_FAILOVER") == "" {
		t.Skip("starts real Redis topologies: set VIGIL_FAILOVER=1 (make test-failover)")
	}
}

func TestSentinelManualFailover(t *testing.T) {
	gate(t)
	s := StartSentinel(t, SentinelPorts{Master: 6451, Replica: 6452, Sentinel: 6453}, SentinelConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if a, err := s.MasterAddr(ctx); err != nil || a != s.Master.Addr() {
		t.Fatalf("master %q, %v; want %s", a, err, s.Master.Addr())
	}
	at, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := s.WaitNewMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted +%s, announced +%s", sw.Promoted.Sub(at).Round(time.Millisecond), sw.Announced.Sub(at).Round(time.Millisecond))
}

func TestSentinelMasterKill(t *testing.T) {
	gate(t)
	s := StartSentinel(t, SentinelPorts{Master: 6451, Replica: 6452, Sentinel: 6453}, SentinelConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := s.Master.Kill()
	sw, err := s.WaitNewMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted +%s, announced +%s", sw.Promoted.Sub(at).Round(time.Millisecond), sw.Announced.Sub(at).Round(time.Millisecond))
}

func TestClusterMasterKill(t *testing.T) {
	gate(t)
	c := StartCluster(t, []int{6440, 6441, 6442, 6443, 6444, 6445}, ClusterConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh, err := c.ShardOf(ctx, "vigil:events")
	if err != nil {
		t.Fatal(err)
	}
	at := sh.Master.Kill()
	sw, err := c.WaitPromoted(ctx, sh.Replica)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; %s promoted +%s, cluster ok +%s", sh.Master.Addr(), sh.Replica.Addr(),
		sw.Promoted.Sub(at).Round(time.Millisecond), sw.Announced.Sub(at).Round(time.Millisecond))
}
