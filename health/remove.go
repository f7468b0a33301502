package health

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EventWorkerRemoved announces a component removed for good (a slot beyond
// its shrunk pool): its last record and restart history, which the event
// stream alone keeps from then on.
const EventWorkerRemoved = "worker_removed"

// removeScript deletes a component's keys if no one else holds its slot
// and it runs no process.
//
// KEYS: component hash, slot lease, restarts hash, crash window, heartbeat
// key, worker stats, worker pause (one hash tag).
// ARGV[1]: the remover's lease value; "" for a slot that must have no
// holder at all.
// Returns {1, status} removed, {0, status} it runs (or waits in backoff),
// {-1, holder} the slot is another's.
var removeScript = redis.NewScript(`
local owner = ARGV[1]
local l = redis.call('GET', KEYS[2])
if l and l ~= owner then return {-1, l} end
local st = redis.call('HGET', KEYS[1], 'status') or ''
if st ~= '' and st ~= 'stopped' and st ~= 'failed' then return {0, st} end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
return {1, st}
`)

// ErrRunning is returned by Remove for a component that runs a process or
// waits to restart.
var ErrRunning = fmt.Errorf("%w: the worker runs or waits to restart", ErrTransition)

// Remove deletes component c for good: its record, restart history, crash
// window, heartbeat, counters and pause, and its slot lease, in one atomic
// step, then drops it from the index and announces EventWorkerRemoved with
// c's last view (c is the record the caller read before). owner is the
// remover's lease value; "" means the slot must have no holder. It answers
// an *OwnerError when another holds the slot and ErrRunning when the
// record is not stopped or failed.
func (s *Store) Remove(ctx context.Context, c Component, owner string, now time.Time) error {
	id, k := c.ID, s.keys
	out, err := removeScript.Run(ctx, s.rdb, []string{k.Component(id), k.Slot(id), k.Restarts(id), k.Crashes(id),
		k.Heartbeat(id), k.WorkerStats(id), k.WorkerPause(id)}, owner).Slice()
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	code, _ := out[0].(int64)
	tok, _ := out[1].(string)
	switch code {
	case -1:
		return &OwnerError{Component: id, Writer: owner, Holder: tok}
	case 0:
		return fmt.Errorf("remove %s (%s): %w", id, tok, ErrRunning)
	}
	v := c.View()
	pipe := s.rdb.Pipeline()
	pipe.SRem(ctx, k.Components(), id.String())
	pipe.SRem(ctx, k.Free(), id.String())
	s.addEvent(ctx, pipe, Event{Topic: id.Topic(), Type: EventWorkerRemoved, Timestamp: now.UnixMilli(), Worker: &v})
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("remove %s: keys deleted, index or event not: %w", id, err)
	}
	return nil
}
