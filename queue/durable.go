package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vigil-dev/vigil/health"
)

// DurableConfig makes Enqueue answer only once the task reached Replicas
// replicas of its master, waiting at most Timeout: an acknowledged task is
// kept through a failover (failover's TestDurableEnqueue). Replicas 0
// turns it off.
type DurableConfig struct {
	Replicas int
	Timeout  time.Duration
}

// DurableTimeoutDefault is how long a durable enqueue waits for its
// replicas when no timeout is set.
const DurableTimeoutDefault = 500 * time.Millisecond

// ErrNotDurable: the task was written on the master but did not reach the
// replicas asked for in time; a failover now could lose it. Enqueuing it
// again with the same task id is safe (asynq.ErrTaskIDConflict if it was
// kept).
var ErrNotDurable = errors.New("not on enough replicas in time")

// waitReplicas waits until what was written to q's master before now has
// reached cfg.Replicas replicas. WAIT counts the writes of its own
// connection: it runs on one connection after a write of its own, which the
// master's replication stream orders after the task (written by asynq on
// another connection, already answered). It returns how many replicas
// acknowledged.
func waitReplicas(ctx context.Context, rdb redis.UniversalClient, keys health.Keys, q string, cfg DurableConfig) (int, error) {
	key := keys.Durable(q)
	// One server: its pipeline runs on one connection. A cluster: the
	// pipeline of the node that holds the key.
	var node redis.Cmdable = rdb
	if c, ok := rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("find the master of %s: %w", key, err)
		}
		node = n
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DurableTimeoutDefault
	}
	pipe := node.Pipeline() // one connection: WAIT counts its writes
	pipe.Set(ctx, key, time.Now().UnixMilli(), time.Minute)
	wait := pipe.Do(ctx, "WAIT", cfg.Replicas, timeout.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("wait for %d replicas: %w", cfg.Replicas, err)
	}
	n, err := wait.Int()
	if err != nil {
		return 0, fmt.Errorf("wait for %d replicas: %w", cfg.Replicas, err)
	}
	return n, nil
}
