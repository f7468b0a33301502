package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestTopologyFault(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{context.Canceled, false},
		{redis.ErrClosed, false},
		{fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{errors.New("EOF"), true},
		{context.DeadlineExceeded, true},
		{replyErr("CLUSTERDOWN The cluster is down"), true},
		{replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyErr("MOVED 3999 127.0.0.1:6381"), true},
		{replyErr("READONLY You can't write against a read only replica."), true},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyErr("ERR Error running script"), false},
	} {
		if got := topologyFault(tt.err); got != tt.want {
			t.Errorf("topologyFault(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestClusterClientFailingTimeout(t *testing.T) {
	for u, want := range map[string]int{
		"redis-cluster://127.0.0.1:1,127.0.0.1:2":                           FailingTimeoutDefault,
		"redis-cluster://127.0.0.1:1,127.0.0.1:2?failing_timeout_seconds=7": 7,
	} {
		c, err := Open(u)
		if err != nil {
			t.Fatal(err)
		}
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("%s: %T", u, c)
		}
		if got := cc.Options().FailingTimeoutSeconds; got != want {
			t.Errorf("%s: FailingTimeoutSeconds %d, want %d", u, got, want)
		}
		_ = c.Close()
	}
}

// replyErr is an error reply of Redis (go-redis's redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}
