package supervisor

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// leaderTick claims or renews the leader lease and, when leader, notices
// lost hosts, announces queue statistics and trims the event stream.
func (s *Supervisor) leaderTick(ctx context.Context, ctl control) error {
	hosts, control := ctl.hosts, ctl.raw
	keys := s.store.Keys()
	asked := s.cfg.Clock.Now()
	ok, err := s.store.Claim(ctx, keys.Leader(), s.cluster.me, s.cluster.takeover, s.cfg.Lease)
	if err != nil {
		return err
	}
	if s.cfg.OnLeader != nil {
		s.cfg.OnLeader(ok, asked.Add(s.cfg.Lease))
	}
	if ok != s.cluster.leader {
		s.cluster.leader = ok
		s.log.Info("leadership changed", "leader", ok)
		if ok {
			s.hostEvent(ctx, "leader", s.cfg.Host)
		}
	}
	if !ok {
		return nil
	}
	now := s.cfg.Clock.Now()
	// After an outage, a host's record may have expired meanwhile (it was
	// written a lease before); each host rewrites it at the tick right
	// after Redis answers it again. No host is judged lost until Redis has
	// answered this one for a tick's length: the others had theirs.
	settling := now.Sub(s.redis.answeringSince()) < s.cfg.Lease/3
	for _, h := range hosts {
		f := fieldLostPrefix + h.ID
		// This host is alive whatever its record says: the record expires
		// during a Redis outage longer than a lease, and this tick, which
		// reads the hosts before writing its own record, is the first after.
		if h.Alive || h.ID == s.cfg.Host {
			if _, was := control[f]; was {
				s.store.Client().HDel(ctx, keys.Control(), f)
			}
			// A late host watched that renewed after all (claim.go).
			if w := fieldWatchedPrefix + h.ID; !s.late(h) && control[w] != "" && !noteFor(control[w], h.SeenAt) {
				s.store.Client().HDel(ctx, keys.Control(), w)
			}
			continue
		}
		if settling {
			continue
		}
		if _, done := control[f]; done {
			if now.Sub(h.SeenAt) > time.Hour { // forget long-lost hosts
				s.store.Client().ZRem(ctx, keys.Hosts(), h.ID)
				s.store.Client().HDel(ctx, keys.Control(), f, fieldWatchedPrefix+h.ID)
			}
			continue
		}
		s.log.Warn("host lost", "lost_host", h.ID, "last_seen", h.SeenAt)
		data, _ := json.Marshal(map[string]any{"host": h.ID, "status": "lost", "last_seen": h.SeenAt.UnixMilli()})
		ev := health.Event{Topic: "host:" + h.ID + ":status", Type: health.EventHost, Timestamp: now.UnixMilli(), Data: data}
		if _, err := s.store.AddEvent(ctx, ev); err != nil {
			return err
		}
		s.cfg.Metrics.HostLost()
		s.alert("host_lost", ev)
		s.store.Client().HSet(ctx, keys.Control(), f, now.UnixMilli())
	}
	if s.cfg.Stats != nil {
		s.announceStats(ctx)
	}
	return s.store.Client().XTrimMaxLenApprox(ctx, keys.Events(), health.MaxEventsDefault, 0).Err()
}

// announceStats emits queue_update events for the queues whose statistics
// changed since the last tick.
func (s *Supervisor) announceStats(ctx context.Context) {
	var queues []string
	for q := range s.cluster.sizes {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	stats, err := s.cfg.Stats(ctx, queues)
	if err != nil {
		s.log.Warn("queue statistics", "err", err)
		return
	}
	if s.cluster.lastStats == nil {
		s.cluster.lastStats = map[string]string{}
	}
	for q, v := range stats {
		data, _ := json.Marshal(v)
		if s.cluster.lastStats[q] == string(data) {
			continue
		}
		s.cluster.lastStats[q] = string(data)
		topic := "queue:" + q + ":status"
		if q == "" {
			topic = "queue:status"
		}
		if _, err := s.store.AddEvent(ctx, health.Event{Topic: topic, Type: health.EventQueue,
			Timestamp: s.cfg.Clock.Now().UnixMilli(), Data: data}); err != nil {
			s.log.Warn("announce queue statistics", "err", err)
			return
		}
	}
}
