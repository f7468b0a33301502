package queue

import (
	"crypto/sha1"
	"encoding/hex"
)

// AsynqVersion is the asynq release whose Redis layout this package relies
// on (docs/design.md §9): the keys below, the fields of a task hash, and the
// dequeue script that dequeue.go wraps. TestAsynqPinned fails when the
// build uses another version or the behaviour changes.
const AsynqVersion = "v0.26.0"

// asynq's keys of queue q (asynq internal/base/base.go). The braces are
// Redis Cluster hash tags: every key of q, and Vigil's per-task keys of q,
// share one slot.
func asynqQueuePrefix(q string) string { return "asynq:{" + q + "}:" }

// asynqAllQueuesKey is the set of the queues asynq knows: its Inspector
// answers "queue not found" for a queue missing from it.
const asynqAllQueuesKey = "asynq:queues"

func asynqPendingKey(q string) string  { return asynqQueuePrefix(q) + "pending" }
func asynqActiveKey(q string) string   { return asynqQueuePrefix(q) + "active" }
func asynqLeaseKey(q string) string    { return asynqQueuePrefix(q) + "lease" }
func asynqPausedKey(q string) string   { return asynqQueuePrefix(q) + "paused" }
func asynqTaskPrefix(q string) string  { return asynqQueuePrefix(q) + "t:" }
func asynqTaskKey(q, id string) string { return asynqTaskPrefix(q) + id }

// asynqDefaultMaxRetry is the MaxRetry asynq gives a task enqueued without
// one.
const asynqDefaultMaxRetry = 25

// ownerField is the field Vigil adds to asynq's task hash when a worker
// dequeues the task: "<component>:<pid>" of the process that holds it (see
// dequeue.go). No asynq script reads, writes or deletes fields it does not
// know one by one, so the field rides along until the next dequeue
// overwrites it, the requeue removes it, or the hash is deleted.
const ownerField = "vigil_owner"

// runField is the run token Vigil's dequeue increments on asynq's task hash:
// one value per dequeue, so that an outcome kept from one run of a task is
// never written over a later run of it (kept.go). It rides along as
// ownerField does.
const runField = "vigil_run"

// asynqDequeueSource is asynq v0.26.0's dequeue script, byte for byte
// (internal/rdb/rdb.go, dequeueCmd). Its SHA1 is what asynq's server sends
// with EVALSHA; dequeue.go recognizes the call by that hash.
//
// KEYS: pending, paused, active, lease. ARGV: lease expiry (Unix s), task
// key prefix. Returns the encoded task message, or nil.
const asynqDequeueSource = `
if redis.call("EXISTS", KEYS[2]) == 0 then
	local id = redis.call("RPOPLPUSH", KEYS[1], KEYS[3])
	if id then
		local key = ARGV[2] .. id
		redis.call("HSET", key, "state", "active")
		redis.call("HDEL", key, "pending_since")
		redis.call("ZADD", KEYS[4], ARGV[1], id)
		return redis.call("HGET", key, "msg")
	end
end
return nil`

// asynqDequeueSHA is the SHA1 asynq sends for its dequeue script.
var asynqDequeueSHA = func() string {
	h := sha1.Sum([]byte(asynqDequeueSource))
	return hex.EncodeToString(h[:])
}()
