package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverStart is asked before a heartbeat deadline kills: when did the
// Redis server that holds w's keys start? A restart that fell between
// the monitor's calls (a fast one, or one while the monitor could not
// run: a machine so loaded that its goroutine waited for longer than the
// restart) is an outage it did not see, and the worker could not beat
// meanwhile: its key expired for that, not for a hang. The server's start
// is recorded as the shard's return (availability.restarted), and the
// caller judges again with the TTL of grace that gives.
//
// The start taken is the latest it may be (see serverAge), so the grace
// is never short: at most a second longer than the restart called for.
//
// It reports false when the call failed: Redis does not answer (or
// refuses, LOADING…), an outage, judged after Redis returns. A server
// that answers without saying (an ACL without INFO, a Redis that lacks
// the field, miniredis) leaves the judgement as it was.
func (s *Supervisor) serverStart(w *worker, sh shard) bool {
	key := s.store.Keys().Heartbeat(w.id)
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	age, err := serverAge(ctx, s.store.Client(), key)
	cancel()
	var rerr redis.Error
	switch {
	case err == nil:
		s.answered(start, sh)
		s.redis.restarted(sh, s.cfg.Clock.Now().Add(-age))
	case errors.As(err, &rerr) && faultKind(err) == kindUnreachable, errors.Is(err, errNoUptime):
		s.answered(start, sh)
		s.logw(w).Debug("redis does not say when it started: judged without it", "err", err)
	default:
		s.redis.shardLost(sh)
		s.redisFailed(err)
		return false
	}
	return true
}

var errNoUptime = errors.New("INFO server has no uptime_in_seconds")

// serverAge reads, from the server that holds key (on a Redis Cluster,
// its master), how long it has run at least (see age).
func serverAge(ctx context.Context, rdb redis.UniversalClient, key string) (time.Duration, error) {
	var info *redis.StringCmd
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, err
		}
		info = node.Info(ctx, "server")
	} else {
		info = rdb.Info(ctx, "server")
	}
	text, err := info.Result()
	if err != nil {
		return 0, err
	}
	return age(text)
}

// age is how long a server has run at least, from the text of its INFO
// server. Redis computes uptime_in_seconds as its clock's second less its
// start's second, both rounded down: the start lies in the second
// (now's second − uptime), and its latest instant is that second's end.
// server_time_usec (Redis 6.2+) gives now's fraction of a second; without
// it the age is uptime − 1 s. Never below zero.
func age(info string) (time.Duration, error) {
	var up, usec int64 = -1, -1
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "uptime_in_seconds" && k != "server_time_usec") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %s %q", errNoUptime, k, v)
		}
		if k == "uptime_in_seconds" {
			up = n
		} else {
			usec = n
		}
	}
	if up < 0 {
		return 0, errNoUptime
	}
	a := time.Duration(up-1) * time.Second
	if usec >= 0 {
		a += time.Duration(usec%1_000_000) * time.Microsecond
	}
	return max(a, 0), nil
}
