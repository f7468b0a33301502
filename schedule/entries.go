package schedule

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// asynqWriteEntriesScript is asynq v0.26.0's writeSchedulerEntriesCmd
// (internal/rdb/rdb.go), byte for byte. KEYS: the scheduler's entries
// list. ARGV: TTL in seconds, then the encoded entries.
var asynqWriteEntriesScript = redis.NewScript(`
redis.call("DEL", KEYS[1])
for i = 2, #ARGV do
	redis.call("LPUSH", KEYS[1], ARGV[i])
end
redis.call("EXPIRE", KEYS[1], ARGV[1])
return redis.status_reply("OK")`)

// writeEntries lists the schedules as the entries of one asynq scheduler,
// as asynq's own scheduler does at each heartbeat (rdb.WriteSchedulerEntries),
// so that asynq's Inspector (SchedulerEntries, ListSchedulerEnqueueEvents),
// its CLI and asynqmon show them. They expire unless a leader rewrites
// them.
func (s *Scheduler) writeEntries(ctx context.Context, now time.Time) error {
	prefix := s.hs.Keys().Prefix
	key := asynqEntriesKey(schedulerID(prefix))
	ttl := 2 * s.cfg.EntriesEvery
	args := []any{int(ttl.Seconds())}
	for _, name := range s.names {
		c := s.cache[name]
		d := c.v.Definition
		e, err := message(entryMessageType, map[string]any{
			"id": entryID(prefix, name), "spec": d.Spec, "task_type": d.Type, "task_payload": []byte(d.Payload),
			"enqueue_options":   options(d, s.cfg.TaskTimeouts[d.Queue]),
			"next_enqueue_time": c.v.withNext(c.spec, now).Next, "prev_enqueue_time": c.v.LastFired,
		})
		if err != nil {
			return err
		}
		args = append(args, e)
	}
	pipe := s.hs.Client().Pipeline()
	if len(args) == 1 {
		pipe.ZRem(ctx, asynqAllSchedulers, key)
		pipe.Del(ctx, key)
	} else {
		pipe.ZAdd(ctx, asynqAllSchedulers, redis.Z{Score: float64(now.Add(ttl).Unix()), Member: key})
		asynqWriteEntriesScript.Eval(ctx, pipe, []string{key}, args...)
	}
	_, err := pipe.Exec(ctx)
	return err
}
