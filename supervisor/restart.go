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

// restartUnseen is asked before a heartbeat deadline kills w, whose key
// is gone: did the Redis server that holds it (re)start after w's last
// beat (beat: a time the last beat came no earlier than; for a worker
// that never beat, when start_timeout began)? A restart that fell
// between the monitor's calls (a fast one, or one while the monitor could
// not run: a machine so loaded that its goroutine waited longer than the
// restart) is an outage it did not see. The worker could not beat
// meanwhile, nor while the server loaded its data: its key expired for
// that, not for a hang. Then the shard is taken to answer from now
// (availability.restarted), once per restart, and the caller judges again
// with the TTL of grace that gives: a hung worker is killed a TTL later
// than it would have been, a healthy one lives.
//
// It asks INFO server: run_id, and how long the server has run at least
// (serverAge), so a restart is never missed for the rounding of its
// uptime. (INFO is tried again as go-redis does: a connection to a server
// gone, found dead by the write, is not a refusal of INFO.)
//
// It reports unseenDown when the call failed: Redis does not answer (or
// refuses, LOADING…), an outage, judged after Redis returns. A server
// that answers with an error or without the fields (an ACL without INFO,
// a proxy, miniredis) leaves the judgement as it was, with a warning (once
// for a lasting refusal): a hang kill is never put off by a reply that
// may not change. Nor by a call that fails without a reply while the
// server answers PING (a proxy that drops INFO).
//
// A slow call (INFO stalled, or its server answered PING only after a
// stall) counts as one for every worker of the shard (answered: the
// monitor could make no other call meanwhile), so the caller's worker is
// judged again a TTL later. Once per process until a beat of it is read
// (TestSlowInfoGraceAgainAfterABeat): the next time, no beat read since,
// the worker is judged at once (unseenKill). Its key was gone a TTL after
// the first (for a worker that never beat, start_timeout), Redis
// answering meanwhile, so its missing beats were not the stall's. Without
// that, a proxy that holds INFO (or drops it, go-redis trying four times
// over a slow link) would spare a hung worker at every judgement
// (TestHangKilledWhenInfoIsHeld, TestHangKilledWhenInfoDropsOverASlowLink,
// TestStartTimeoutKilledWhenInfoIsHeld). A proxy that holds INFO spares k
// hung workers a TTL each, one after the other (each first slow call
// moves the shard's answering for all).
func (s *Supervisor) restartUnseen(w *worker, sh shard, beat time.Time) unseen {
	key := s.store.Keys().Heartbeat(w.id)
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	node, err := serverOf(ctx, s.store.Client(), key)
	var run string
	var age time.Duration
	if err == nil {
		run, age, err = serverRun(ctx, node)
	}
	cancel()
	var slow bool
	var rerr redis.Error
	switch {
	case err == nil:
		slow = s.answered(start, sh)
		// The latest the server can have started. (Not compared with the
		// shard's last return the monitor saw: on a Cluster another node's
		// answer moves it, while this one may still load. A restart the
		// monitor did see costs a hung worker one TTL more, once.)
		now := s.cfg.Clock.Now()
		if now.Add(-age).After(beat) && s.redis.restarted(sh, run, now.Add(-age), now) {
			s.logw(w).Warn("heartbeat key gone after a Redis restart the monitor did not see: judged again a TTL from now",
				"pid", w.proc.pid, "redis_run_id", run, "redis_up_at_least", age)
			return unseenJudge
		}
	case errors.As(err, &rerr) && faultKind(err) == kindUnreachable, errors.Is(err, errNoUptime):
		slow = s.answered(start, sh)
		switch {
		case !infoRefusal(err):
			// Another error reply (max clients…): this time only.
			s.logw(w).Warn("could not ask Redis when it started (INFO server): judged without it", "err", err)
		case !s.infoRefused:
			s.infoRefused = true
			s.log.Warn("redis does not say when it started (INFO server): a Redis restart between the monitor's calls may be taken for a hang", "err", err)
		}
	case !errors.As(err, &rerr) && node != nil && s.pings(node):
		// INFO failed without a reply, and the same server answers PING
		// at once: INFO is what fails, not Redis (a proxy that drops the
		// connection on a command it does not serve). As an outage it
		// would be judged again after the return, and again, a hung
		// worker never killed (TestHangKilledWhenInfoDropsTheConnection).
		// A server that answers both only after a stall (INFO timed out)
		// was slow: the call from INFO's start to PING's answer counts as
		// one (TestInfoStallAtAJudgementKillsNothing). A restart cannot
		// fall between the two calls: the server that answered the
		// heartbeat read just before cannot be down and up again in that
		// time.
		slow = s.answered(start, sh)
		if !s.infoDropped {
			s.infoDropped = true
			s.log.Warn("redis answers PING but INFO server fails without a reply (a proxy that drops the connection?): a Redis restart between the monitor's calls may be taken for a hang",
				"err", err)
		}
	default:
		s.redis.shardLost(sh)
		s.redisFailed(err)
		return unseenDown
	}
	switch {
	case !slow:
		return unseenJudge
	case w.proc.slowGraced:
		s.logw(w).Warn("asking Redis when it started was slow again, no beat read since the last time: judged without waiting",
			"pid", w.proc.pid)
		return unseenKill
	}
	w.proc.slowGraced = true
	return unseenJudge
}

// unseen is what restartUnseen concluded.
type unseen int

const (
	// unseenDown: the call failed, an outage (judged after Redis returns).
	unseenDown unseen = iota
	// unseenJudge: judged as the shard's availability now says (a grace
	// given, a slow call, or neither).
	unseenJudge
	// unseenKill: judged at once (a second slow call, no beat read since).
	unseenKill
)

// pings reports whether node answers PING within OpTimeout.
func (s *Supervisor) pings(node redis.Cmdable) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	defer cancel()
	return node.Ping(ctx).Err() == nil
}

var errNoUptime = errors.New("INFO server lacks run_id or uptime_in_seconds")

// infoRefusal reports whether err is a lasting refusal of INFO server: no
// permission (an ACL), a command or section this server or proxy does not
// know, or the fields missing.
func infoRefusal(err error) bool {
	if errors.Is(err, errNoUptime) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "not supported") || strings.Contains(msg, "unknown section")
}

// serverOf returns a client of the server that holds key: on a Redis
// Cluster, its master; else rdb itself.
func serverOf(ctx context.Context, rdb redis.UniversalClient, key string) (redis.Cmdable, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node, nil
	}
	return rdb, nil
}

// serverRun reads, from node, its run_id and how long it has run at least
// (serverAge).
func serverRun(ctx context.Context, node redis.Cmdable) (string, time.Duration, error) {
	text, err := node.Info(ctx, "server").Result()
	if err != nil {
		return "", 0, err
	}
	return serverAge(text)
}

// serverAge reads the text of INFO server: the run_id, and how long the
// server has run at least. Redis computes uptime_in_seconds as its
// clock's second less its start's second, both rounded down: the start
// lies in the second (now's second − uptime), its latest instant at that
// second's end. server_time_usec (Redis 6.2+) gives now's fraction of a
// second; without it the age is uptime − 1 s. Never below zero.
func serverAge(info string) (string, time.Duration, error) {
	var run string
	var up, usec int64 = -1, -1
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var n int64
		switch k {
		case "run_id":
			run = v
			continue
		case "uptime_in_seconds", "server_time_usec":
			var err error
			if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return "", 0, fmt.Errorf("%w: %s %q", errNoUptime, k, v)
			}
		default:
			continue
		}
		if k == "uptime_in_seconds" {
			up = n
		} else {
			usec = n
		}
	}
	if up < 0 || run == "" {
		return "", 0, errNoUptime
	}
	a := time.Duration(up-1) * time.Second
	if usec >= 0 {
		a += time.Duration(usec%1_000_000) * time.Microsecond
	}
	return run, max(a, 0), nil
}
