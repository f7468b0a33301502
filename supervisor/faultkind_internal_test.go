package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestFaultKind: the supervisor's outage line and metric name the refusal
// Redis answered, also wrapped and inside a script's error, and call
// anything without a reply unreachable.
func TestFaultKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{replyErr("READONLY You can't write against a read only replica."), "READONLY"},
		{fmt.Errorf("renew 4 leases: %w", replyErr("READONLY You can't write against a read only replica. script: b2ee, on @user_script:4.")), "READONLY"},
		{fmt.Errorf("write host b: %w", replyErr("CLUSTERDOWN Hash slot not served")), "CLUSTERDOWN"},
		{replyErr("ERR Error running script (call to f_1): @user_script:1: -MASTERDOWN Link with MASTER is down"), "MASTERDOWN"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, kindUnreachable},
		{context.DeadlineExceeded, kindUnreachable},
		{errors.New("redis: all sentinels specified in configuration are unreachable"), kindUnreachable},
		{redis.ErrClosed, kindUnreachable},
	} {
		if got := faultKind(c.err); got != c.want {
			t.Errorf("faultKind(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}

// replyErr is an error reply of Redis (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")
