package queue

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// TaskSize is how many bytes one task takes in asynq's hash: its encoded
// message (payload, error, …) and its result.
type TaskSize struct {
	ID    string
	Bytes int64
}

// taskSizesSource returns id, size pairs of the ids at positions
// ARGV[2]..ARGV[3] of KEYS[1], a list (ARGV[1] = "list") or a sorted set
// (ranked by score), ARGV[4] being the task key prefix. It reads sizes
// only (HSTRLEN): what a page would cost before anything is loaded.
const taskSizesSource = `
local ids
if ARGV[1] == "list" then
	ids = redis.call("LRANGE", KEYS[1], ARGV[2], ARGV[3])
else
	ids = redis.call("ZRANGE", KEYS[1], ARGV[2], ARGV[3])
end
local out = {}
for _, id in ipairs(ids) do
	local key = ARGV[4] .. id
	table.insert(out, id)
	table.insert(out, redis.call("HSTRLEN", key, "msg") + redis.call("HSTRLEN", key, "result"))
end
return out`

var taskSizesScript = redis.NewScript(taskSizesSource)

// TaskSizes returns the ids and sizes of the page of queue q's tasks in
// state that asynq's Inspector would list for that page (1-based) and page
// size, in the same order: to bound what a listing loads before asynq
// loads it.
func (c *Control) TaskSizes(ctx context.Context, q, state string, page, size int) ([]TaskSize, error) {
	if err := health.CheckName("queue", q); err != nil {
		return nil, err
	}
	start, stop := int64((page-1)*size), int64((page-1)*size+size-1)
	kind, key := "zset", asynqQueuePrefix(q)+state
	switch state {
	case "pending", "active":
		// asynq LPUSHes: its page is the reversed range from the tail.
		kind, start, stop = "list", -stop-1, -start-1
	case "scheduled", "retry", "archived", "completed":
	default:
		return nil, fmt.Errorf("task sizes: unknown state %q", state)
	}
	res, err := taskSizesScript.Run(ctx, c.rdb, []string{key}, kind, start, stop, asynqTaskPrefix(q)).Slice()
	if err != nil {
		return nil, fmt.Errorf("task sizes of %s %s: %w", state, q, err)
	}
	out := make([]TaskSize, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, _ := res[i].(string)
		n, _ := res[i+1].(int64)
		out = append(out, TaskSize{ID: id, Bytes: n})
	}
	if kind == "list" {
		slices.Reverse(out)
	}
	return out, nil
}

// TaskSizeOf returns the size of task id of queue q (0 if there is none).
func (c *Control) TaskSizeOf(ctx context.Context, q, id string) (int64, error) {
	if err := health.CheckName("queue", q); err != nil {
		return 0, err
	}
	pipe := c.rdb.Pipeline()
	m := pipe.HStrLen(ctx, asynqTaskKey(q, id), "msg")
	r := pipe.HStrLen(ctx, asynqTaskKey(q, id), "result")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("task size of %s in %s: %w", id, q, err)
	}
	return m.Val() + r.Val(), nil
}
