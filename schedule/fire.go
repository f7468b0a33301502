package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Event types and topic of schedules (docs/design.md §8).
const (
	EventFired  = "schedule_fired"
	EventMissed = "schedule_missed"
)

// Topic is the event topic of schedule name.
func Topic(name string) string { return "schedule:" + name }

// FiredData is a schedule_fired event's data: a tick decided by a fire
// (enqueued, or refused by asynq's uniqueness lock), or a trigger.
type FiredData struct {
	Schedule string `json:"schedule"`
	Queue    string `json:"queue"`
	// Tick is the tick's instant (Unix ms); 0 for a trigger.
	Tick   int64  `json:"tick,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	// Result: enqueued; duplicate (the unique option's lock was held:
	// nothing enqueued); conflict (a task with the tick's id existed).
	Result string `json:"result"`
	Manual bool   `json:"manual,omitempty"`
	// LagMS is from the tick to the enqueue, in ms.
	LagMS float64 `json:"lag_ms,omitempty"`
	Host  string  `json:"host,omitempty"`
	// At is when the task was enqueued (Unix ms).
	At int64 `json:"at"`
}

// MissedData is a schedule_missed event's data: ticks a leader found late
// and what its catch-up policy made of them.
type MissedData struct {
	Schedule string  `json:"schedule"`
	Queue    string  `json:"queue"`
	Policy   CatchUp `json:"policy"`
	// Missed ticks, the first and last of them (Unix ms).
	Missed      int   `json:"missed"`
	FirstMissed int64 `json:"first_missed"`
	LastMissed  int64 `json:"last_missed"`
	// Fired of them are enqueued (in their own schedule_fired events),
	// Skipped never will be.
	Fired   int    `json:"fired"`
	Skipped int    `json:"skipped"`
	Capped  bool   `json:"capped,omitempty"`
	Host    string `json:"host,omitempty"`
}

// fireArgs is one run of the fire script.
type fireArgs struct {
	queue, name string
	rev         string    // with the definition read; "" for a trigger
	tick        time.Time // zero for a trigger
	now         time.Time
	skipped     int       // earlier ticks this fire decides as skipped
	last        time.Time // the last decided tick the caller read
	task        task
}

// runFire runs the fire script and returns its reply and the schedule's
// last decided tick.
func runFire(ctx context.Context, rdb redis.Scripter, keys health.Keys, a fireArgs) (string, time.Time, error) {
	t := a.task
	k := []string{keys.Schedule(a.queue, a.name), asynqTaskKey(a.queue, t.id), asynqPendingKey(a.queue)}
	if t.uniqueKey != "" {
		k = append(k, t.uniqueKey)
	}
	tick := ""
	if !a.tick.IsZero() {
		tick = strconv.FormatInt(a.tick.UnixMilli(), 10)
	}
	out, err := fireScript.Run(ctx, rdb, k, a.rev, tick, t.id, t.msg, a.now.UnixNano(), a.now.UnixMilli(),
		t.uniqueTTL, RecentTasks, a.skipped, ms(a.last)).Slice()
	if err != nil {
		return "", time.Time{}, err
	}
	return reply(out)
}

// runSkip records ticks up to tick as skipped.
func runSkip(ctx context.Context, rdb redis.Scripter, keys health.Keys, q, name, rev string, tick, last time.Time, n int) (string, time.Time, error) {
	out, err := skipScript.Run(ctx, rdb, []string{keys.Schedule(q, name)}, rev, tick.UnixMilli(), n, ms(last)).Slice()
	if err != nil {
		return "", time.Time{}, err
	}
	return reply(out)
}

func reply(out []any) (string, time.Time, error) {
	if len(out) != 2 {
		return "", time.Time{}, fmt.Errorf("unexpected reply %v", out)
	}
	res, _ := out[0].(string)
	last, _ := out[1].(int64)
	var t time.Time
	if last > 0 {
		t = time.UnixMilli(last)
	}
	return res, t, nil
}

// afterFire queues on pipe what follows a task enqueued by a fire: its
// event, the queue in asynq's index of queues (asynq's client does that
// once per process; after Redis lost its data, once is not enough), and
// the enqueue in asynq's history of the schedule's entry.
func afterFire(ctx context.Context, pipe redis.Pipeliner, hs *health.Store, d FiredData, entry string, at time.Time) {
	data, _ := json.Marshal(d)
	hs.AddEventTo(ctx, pipe, health.Event{Topic: Topic(d.Schedule), Type: EventFired, Timestamp: at.UnixMilli(), Data: data})
	if d.Result != resEnqueued {
		return
	}
	pipe.SAdd(ctx, asynqAllQueues, d.Queue)
	if ev, err := message(eventMessageType, map[string]any{"task_id": d.TaskID, "enqueue_time": at}); err == nil {
		// asynq's recordSchedulerEnqueueEventCmd, as two commands.
		key := asynqHistoryKey(entry)
		pipe.ZRemRangeByRank(ctx, key, 0, -asynqHistoryMax)
		pipe.ZAdd(ctx, key, redis.Z{Score: float64(at.Unix()), Member: ev})
	}
}

// missedEvent queues a schedule_missed event on pipe.
func missedEvent(ctx context.Context, pipe redis.Pipeliner, hs *health.Store, d MissedData, at time.Time) {
	data, _ := json.Marshal(d)
	hs.AddEventTo(ctx, pipe, health.Event{Topic: Topic(d.Schedule), Type: EventMissed, Timestamp: at.UnixMilli(), Data: data})
}
