package queue

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a Redis call of the worker failed, which decides what the worker does
// about it (hook.go):
//
//   - faultNoAnswer: no reply came (connection refused, reset or closed, a
//     read timeout). The command may have run: a dequeue may have made a
//     task active under this process (settled after the link is back, see
//     link.go), an outcome may have been written (written again under the
//     owner guard, which then finds it done). The link goes down.
//   - faultRefused: Redis answered that it does not take writes now (OOM
//     with maxmemory and noeviction, READONLY on a replica after a
//     failover, MISCONF after a failed save, LOADING, …). The command did
//     not run. Dequeuing pauses for refusedPause; outcomes are kept.
//   - faultNone: success, redis.Nil, a Redis error about the command itself
//     (a script's own error reply), or the caller's context ending: nothing
//     about Redis's health.
type fault int

const (
	faultNone fault = iota
	faultNoAnswer
	faultRefused
)

// refusedPrefixes are the error replies of a Redis that refuses writes, or
// every command, for a while.
var refusedPrefixes = []string{"OOM", "READONLY", "MISCONF", "NOREPLICAS", "LOADING", "MASTERDOWN",
	"CLUSTERDOWN", "TRYAGAIN", "BUSY"}

// faultOf says what kind of fault err is.
func faultOf(err error) fault {
	if err == nil || errors.Is(err, redis.Nil) {
		return faultNone
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range refusedPrefixes {
			if strings.HasPrefix(msg, p) {
				return faultRefused
			}
		}
		return faultNone
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return faultNoAnswer // wrapped in context.DeadlineExceeded by a dial timeout
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return faultNone
	}
	return faultNoAnswer
}

// refusedKind is the first word of a refusal ("OOM", "READONLY", …), the
// label of its metric.
func refusedKind(err error) string {
	k, _, _ := strings.Cut(err.Error(), " ")
	return k
}

// Slow replies: a command answered after slowReply counts as slow (metric
// RedisSlowReplies); one log line per logEvery says so.
const (
	slowReply = 500 * time.Millisecond
	logEvery  = 10 * time.Second
)

// throttledLog lets one line of each kind through per logEvery, and counts
// those it held back (said with the next one let through).
type throttledLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// allow reports whether a line of kind may be written at now, and how many
// were held back since the last one.
func (t *throttledLog) allow(kind string, now time.Time) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last, t.held = map[string]time.Time{}, map[string]int{}
	}
	if last, ok := t.last[kind]; ok && now.Sub(last) < logEvery {
		t.held[kind]++
		return false, 0
	}
	n := t.held[kind]
	t.last[kind], t.held[kind] = now, 0
	return true, n
}
