package failover_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testtopo"
)

// TestSentinelFaultsAtStart: what a process that connects through Sentinel
// is told when it cannot (issue 17, bad input): no sentinel answers, the
// sentinel knows no such master, the master it names does not answer.
// Each error names the sentinels or the master and the reason.
func TestSentinelFaultsAtStart(t *testing.T) {
	gateOnly(t, "sentinel-start")
	s := testtopo.StartSentinel(t, durablePorts, testtopo.SentinelConfig{DownAfter: time.Minute})
	ping := func(url string) error {
		t.Helper()
		c, err := redisconn.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return redisconn.Ping(context.Background(), c, time.Second)
	}
	if err := ping(s.URL); err != nil {
		t.Fatalf("healthy topology: %v", err)
	}
	if err := ping("redis-sentinel://" + s.Sentinel.Addr() + "/nosuch/0"); err == nil ||
		!strings.Contains(err.Error(), `does not know a master named "nosuch"`) {
		t.Errorf("unknown master name: %v", err)
	}
	s.Master.Kill()
	s.Replica.Kill()
	if err := ping(s.URL); err == nil || !strings.Contains(err.Error(), "the sentinels name "+s.Master.Addr()+", which does not answer") {
		t.Errorf("master down: %v", err)
	}
	s.Sentinel.Kill()
	if err := ping(s.URL); err == nil || !strings.Contains(err.Error(), "no sentinel gives its address ("+s.Sentinel.Addr()) {
		t.Errorf("sentinel down: %v", err)
	}
}
