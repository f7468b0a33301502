package queue

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestSeverCutsAClusterNodesConnections (finding E38): a worker's shutdown
// bound severs its Redis connections, so that a call waiting on a Redis
// that does not answer fails at once. A cluster client dials through its
// node clients, never through the cluster client's own DialHook: its
// connections were not tracked, and a worker of a Redis Cluster whose
// supervisor died during a failover waited on a shard past its bound. A call
// in flight on a cluster's node (BLPOP, as good as a reply that does not
// come) returns once the set is severed, and nothing dials again.
func TestSeverCutsAClusterNodesConnections(t *testing.T) {
	for _, kind := range []string{"plain", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			m := miniredis.RunT(t) // answers CLUSTER SLOTS: one node with every slot
			var rdb redis.UniversalClient
			if kind == "cluster" {
				rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}, ContextTimeoutEnabled: true})
			} else {
				rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			}
			defer rdb.Close()
			var s connSet
			rdb.AddHook(dialTracker{&s}) // as RunWorker adds its redisHook, whose DialHook is the same
			s.track(rdb)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// A first keyed call: the cluster client has loaded its slot map
			// and command table, so the next command the server sees is the BLPOP.
			if err := rdb.Exists(ctx, "never").Err(); err != nil {
				t.Fatal(err)
			}
			before := m.CommandCount()
			done := make(chan error, 1)
			go func() { done <- rdb.BLPop(ctx, 20*time.Second, "never").Err() }()
			// The BLPOP is in flight once the server counted it (it counts a
			// command as it begins to run it).
			deadline := time.Now().Add(10 * time.Second)
			for m.CommandCount() == before {
				if time.Now().After(deadline) {
					t.Fatal("the BLPOP never reached the server")
				}
				select {
				case err := <-done:
					t.Fatalf("BLPOP returned before the sever: %v", err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			s.sever()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("BLPOP succeeded on a severed connection")
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("a %s client's call in flight still waits 2 s after its connections were severed", kind)
			}
			if err := rdb.Ping(ctx).Err(); err == nil {
				t.Fatal("a severed client dialed again")
			}
		})
	}
}
