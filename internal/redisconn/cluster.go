package redisconn

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// FailingTimeoutDefault is how long (seconds) a cluster client avoids a
// node that failed a command, where it has a choice (go-redis's default is
// 15 s). A failover is over in a few seconds; a failed node should be tried
// again soon after. The URL option failing_timeout_seconds overrides it.
const FailingTimeoutDefault = 1

// newClusterClient is go-redis's cluster client with fast topology
// recovery (TestTopologyFault; failover's TestFailover, cluster
// scenarios): go-redis reloads its slot map only on MOVED, ASK and
// READONLY, or every 10 s; a command whose node does not answer (a master
// killed) keeps being sent to that node until then, whatever the cluster
// did meanwhile. reloadOnFault asks for a reload (go-redis runs
// one at a time, at most one every 200 ms) after every such failure, so
// the new master is used within a reload of its election.
func newClusterClient(o *redis.ClusterOptions) *redis.ClusterClient {
	if o.FailingTimeoutSeconds == 0 {
		o.FailingTimeoutSeconds = FailingTimeoutDefault
	}
	cc := redis.NewClusterClient(o)
	cc.AddHook(reloadOnFault{cc})
	return cc
}

type reloadOnFault struct{ cc *redis.ClusterClient }

func (h reloadOnFault) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if topologyFault(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if topologyFault(err) {
			h.cc.ReloadState(ctx)
			return err
		}
		for _, c := range cmds {
			if topologyFault(c.Err()) {
				h.cc.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

// topologyFault reports whether err may mean the slot map is stale: no
// reply from the node (refused, reset, timed out), or a cluster that says
// it is changing (CLUSTERDOWN, TRYAGAIN, MOVED, READONLY, MASTERDOWN). A
// reply about the command itself, redis.Nil or the caller's context ending
// are not.
func topologyFault(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "READONLY", "MASTERDOWN", "LOADING"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return true // a network error, or a deadline while waiting for a node
}
