package redisconn

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/internal/testtopo"
)

// A client opened while a failover is under way (after the sentinel chose
// the replica, before it announced it) holds its commands too: it heard
// none of the events, and the old master still takes writes, lost once it
// is a replica (found by the fault explorer: sentinel seeds 85009, 85024,
// a host restarted during a manual failover; E22). The replica is frozen
// so that the failover waits for its promotion. Skipped without
// redis-server (testtopo).
func TestGuardHoldsAClientOpenedDuringAFailover(t *testing.T) {
	s := testtopo.StartSentinel(t, testtopo.SentinelPorts{Master: testredis.FreePort(t), Replica: testredis.FreePort(t),
		Sentinel: testredis.FreePort(t)}, testtopo.SentinelConfig{DownAfter: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Replica.Pause()
	if _, err := s.Failover(ctx); err != nil {
		s.Replica.Resume()
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr()})
	defer sc.Close()
	for { // until the sentinel sent the replica its promotion
		m, err := sc.Master(ctx, testtopo.MasterName).Result()
		if err != nil {
			s.Replica.Resume()
			t.Fatal(err)
		}
		if m["failover-state"] == "wait_promotion" {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the sentinel, another process
	}
	c, err := Open(s.URL)
	if err != nil {
		s.Replica.Resume()
		t.Fatal(err)
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = c.Set(wctx, "written-during-the-failover", "1", 0).Err()
	wcancel()
	s.Replica.Resume()
	if err == nil {
		t.Fatal("a client opened during the failover wrote to the old master")
	}
	if _, err := s.WaitNewMaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "after-the-failover", "1", 0).Err(); err != nil {
		t.Fatalf("after the switch: %v", err)
	}
	if a, err := s.MasterAddr(ctx); err != nil || a != s.Replica.Addr() {
		t.Fatalf("master %s, %v", a, err)
	}
}
