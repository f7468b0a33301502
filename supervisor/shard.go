package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// shardOf is where the keys of component id live (see availability): on a
// Redis Cluster the hash slot of its heartbeat key (its record, lease and
// heartbeat share one hash tag), else wholeRedis.
func (s *Supervisor) shardOf(id health.ComponentID) shard {
	if _, ok := s.store.Client().(*redis.ClusterClient); !ok {
		return wholeRedis
	}
	return shard(keySlot(s.store.Keys().Heartbeat(id)))
}

// shardsOf lists the shards of ws's components.
func (s *Supervisor) shardsOf(ws []*worker) []shard {
	out := make([]shard, len(ws))
	for i, w := range ws {
		out[i] = s.shardOf(w.id)
	}
	return out
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first '{' and the next '}', if not
// empty), else of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// pulseShards is the pulse on a Redis Cluster: a PTTL of a running
// worker's heartbeat key on every shard not answered for a pulse, sent to
// the master that holds it (one pipeline per master, in parallel, each
// timed on its own: a stalled or dead master is not taken for the others).
// It runs during an outage too: the workers of the shards that answer are
// judged meanwhile, and a shard's outage must be seen by a call to it.
func (s *Supervisor) pulseShards(cc *redis.ClusterClient) {
	now := s.cfg.Clock.Now()
	quiet := map[shard]string{} // shard → a heartbeat key on it
	for _, w := range s.workers {
		if w.state != stRunning {
			continue
		}
		if sh := s.shardOf(w.id); s.redis.quietShard(sh, now) {
			quiet[sh] = s.store.Keys().Heartbeat(w.id)
		}
	}
	if len(quiet) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OpTimeout)
	defer cancel()
	type batch struct {
		node       *redis.Client
		shards     []shard
		keys       []string
		cmds       []*redis.DurationCmd
		start, end time.Time
	}
	var batches []*batch
	byNode := map[*redis.Client]*batch{}
	var failed []shard
	var firstErr error
	for sh, key := range quiet {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			failed, firstErr = append(failed, sh), cmpErr(firstErr, err)
			continue
		}
		b := byNode[n]
		if b == nil {
			b = &batch{node: n}
			byNode[n] = b
			batches = append(batches, b)
		}
		b.shards = append(b.shards, sh)
		b.keys = append(b.keys, key)
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() {
			pipe := b.node.Pipeline()
			for _, k := range b.keys {
				b.cmds = append(b.cmds, pipe.PTTL(ctx, k))
			}
			b.start = s.cfg.Clock.Now()
			_, _ = pipe.Exec(ctx)
			b.end = s.cfg.Clock.Now()
		})
	}
	wg.Wait()
	for _, b := range batches {
		var ok []shard
		for i, c := range b.cmds {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
				failed, firstErr = append(failed, b.shards[i]), cmpErr(firstErr, err)
				continue
			}
			ok = append(ok, b.shards[i])
		}
		if len(ok) > 0 {
			s.answeredAt(b.start, b.end, ok...)
		}
	}
	if len(failed) == 0 {
		return
	}
	for _, sh := range failed {
		s.redis.shardLost(sh)
	}
	cc.ReloadState(ctx) // the pipelines went to the nodes, past the client's own reload on faults
	s.redisFailed(firstErr)
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
