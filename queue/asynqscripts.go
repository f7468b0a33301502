package queue

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// asynq's scripts that move one of its tasks out of active, and the one its
// recoverer lists expired leases with: copies of asynq v0.26.0's
// (internal/rdb/rdb.go), byte for byte, so that the worker's hook knows
// them by their SHA1 (TestAsynqScriptsPinned compares them with the
// module's source). The hook takes these calls over (hook.go): an outcome
// Redis did not acknowledge is kept and written later under the owner
// guard (kept.go), and the recoverer's list leaves out the tasks of live
// processes (leases.go).

// outcomeScript is one of asynq's scripts that write a task's outcome.
type outcomeScript struct {
	name    string // for logs and metrics
	src     string
	sha     string
	taskKey int // index in KEYS (1-based) of the task's hash
	guarded *redis.Script
}

// outcomeScripts are asynq's outcome writes; the task id is ARGV[1] in
// each.
var outcomeScripts = func() map[string]*outcomeScript {
	m := map[string]*outcomeScript{}
	for _, s := range []*outcomeScript{
		{name: "done", src: asynqDoneSource, taskKey: 3},
		{name: "done", src: asynqDoneUniqueSource, taskKey: 3},
		{name: "complete", src: asynqCompleteSource, taskKey: 4},
		{name: "complete", src: asynqCompleteUniqueSource, taskKey: 4},
		{name: "retry", src: asynqRetrySource, taskKey: 1},
		{name: "archive", src: asynqArchiveSource, taskKey: 1},
		{name: "requeue", src: asynqRequeueSource, taskKey: 4},
	} {
		s.sha = sha1Hex(s.src)
		s.guarded = redis.NewScript(ownerGuard(s.taskKey) + s.src)
		m[s.sha] = s
	}
	return m
}()

// toxicArchive is the archive of a task given the toxic verdict: asynq's
// archive script, and, in the same step and only if the archive was
// written, the delete of the task's two crash counters (the last two KEYS,
// under the queue's hash tag like asynq's keys). Deleted before the
// archive, a worker killed between the two would leave the task active
// with no crash record: the supervisor's recovery would put it back with
// its count at zero, and it would run job_crash_retries more times
// (TestToxicCountersOutliveALostArchive). Deleted with it, an operator who
// runs the archived task again still gets a run
// (TestToxicTaskIsArchivedWithoutRunning). The hook sends it in place of
// asynq's archive of a task the middleware marked toxic (outcome.go).
var toxicArchive = &outcomeScript{name: "archive", src: toxicArchiveSource, sha: sha1Hex(toxicArchiveSource), taskKey: 1,
	guarded: redis.NewScript(ownerGuard(1) + toxicArchiveSource)}

const toxicArchiveSource = `
local function vigil_archive()` + asynqArchiveSource + `
end
local vigil_reply = vigil_archive()
if type(vigil_reply) == "table" and vigil_reply.ok then
	redis.call("DEL", KEYS[#KEYS - 1], KEYS[#KEYS])
end
return vigil_reply`

// errNotOwned is the reply of a guarded outcome whose task is not active
// any more under this process (written already, or recovered by someone).
const errNotOwned = "VIGIL_NOT_OWNED"

// ownerGuard is the prefix that makes an asynq outcome script a guarded
// one: it runs only while the task is active and its owner field names
// this process, and, when the run token is known (not ""), while the task
// is still in the run the outcome is of: a later dequeue, even by this
// process, changed it. The owner field, owner, run token field and run token are
// the last four ARGV, after asynq's own (its scripts address ARGV by
// index, so they never see them).
func ownerGuard(taskKey int) string {
	return `
local vigil_task = KEYS[` + strconv.Itoa(taskKey) + `]
if redis.call("HGET", vigil_task, ARGV[#ARGV - 3]) ~= ARGV[#ARGV - 2] or redis.call("HGET", vigil_task, "state") ~= "active"
	or (ARGV[#ARGV] ~= "" and redis.call("HGET", vigil_task, ARGV[#ARGV - 1]) ~= ARGV[#ARGV]) then
	return redis.error_reply("` + errNotOwned + `")
end`
}

var asynqListLeaseExpiredSHA = sha1Hex(asynqListLeaseExpiredSource)

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// scriptSHA is the SHA1 of the script an EVAL or EVALSHA call runs, "" for
// another command.
func scriptSHA(name string, args []any) string {
	if len(args) < 3 {
		return ""
	}
	s, _ := args[1].(string)
	switch {
	case strings.EqualFold(name, "evalsha"):
		return s
	case strings.EqualFold(name, "eval"):
		return sha1Hex(s)
	}
	return ""
}

// Done: the task completed (no retention): its hash deleted.
// (doneCmd)
const asynqDoneSource = `
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("DEL", KEYS[3]) == 0 then
  return redis.error_reply("NOT FOUND")
end
local n = redis.call("INCR", KEYS[4])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[4], ARGV[2])
end
local total = redis.call("GET", KEYS[5])
if tonumber(total) == tonumber(ARGV[3]) then
	redis.call("SET", KEYS[5], 1)
else
	redis.call("INCR", KEYS[5])
end
return redis.status_reply("OK")
`

// Done of a task with a uniqueness lock.
// (doneUniqueCmd)
const asynqDoneUniqueSource = `
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("DEL", KEYS[3]) == 0 then
  return redis.error_reply("NOT FOUND")
end
local n = redis.call("INCR", KEYS[4])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[4], ARGV[2])
end
local total = redis.call("GET", KEYS[5])
if tonumber(total) == tonumber(ARGV[3]) then
	redis.call("SET", KEYS[5], 1)
else
	redis.call("INCR", KEYS[5])
end
if redis.call("GET", KEYS[6]) == ARGV[1] then
  redis.call("DEL", KEYS[6])
end
return redis.status_reply("OK")
`

// MarkAsComplete: the task completed, kept for its retention.
// (markAsCompleteCmd)
const asynqCompleteSource = `
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZADD", KEYS[3], ARGV[3], ARGV[1]) ~= 1 then
  return redis.error_reply("INTERNAL")
end
redis.call("HSET", KEYS[4], "msg", ARGV[4], "state", "completed")
local n = redis.call("INCR", KEYS[5])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[5], ARGV[2])
end
local total = redis.call("GET", KEYS[6])
if tonumber(total) == tonumber(ARGV[5]) then
	redis.call("SET", KEYS[6], 1)
else
	redis.call("INCR", KEYS[6])
end
return redis.status_reply("OK")
`

// MarkAsComplete of a task with a uniqueness lock.
// (markAsCompleteUniqueCmd)
const asynqCompleteUniqueSource = `
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZADD", KEYS[3], ARGV[3], ARGV[1]) ~= 1 then
  return redis.error_reply("INTERNAL")
end
redis.call("HSET", KEYS[4], "msg", ARGV[4], "state", "completed")
local n = redis.call("INCR", KEYS[5])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[5], ARGV[2])
end
local total = redis.call("GET", KEYS[6])
if tonumber(total) == tonumber(ARGV[5]) then
	redis.call("SET", KEYS[6], 1)
else
	redis.call("INCR", KEYS[6])
end
if redis.call("GET", KEYS[7]) == ARGV[1] then
  redis.call("DEL", KEYS[7])
end
return redis.status_reply("OK")
`

// Retry: the task failed and waits for its next attempt.
// (retryCmd)
const asynqRetrySource = `
if redis.call("LREM", KEYS[2], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[3], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
redis.call("ZADD", KEYS[4], ARGV[3], ARGV[1])
redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "retry")
if tonumber(ARGV[5]) == 1 then
	local n = redis.call("INCR", KEYS[5])
	if tonumber(n) == 1 then
		redis.call("EXPIREAT", KEYS[5], ARGV[4])
	end
	local m = redis.call("INCR", KEYS[6])
	if tonumber(m) == 1 then
		redis.call("EXPIREAT", KEYS[6], ARGV[4])
	end
    local total = redis.call("GET", KEYS[7])
    if tonumber(total) == tonumber(ARGV[6]) then
    	redis.call("SET", KEYS[7], 1)
    	redis.call("SET", KEYS[8], 1)
    else
    	redis.call("INCR", KEYS[7])
    	redis.call("INCR", KEYS[8])
    end
end
return redis.status_reply("OK")`

// Archive: the task failed for good.
// (archiveCmd)
const asynqArchiveSource = `
if redis.call("LREM", KEYS[2], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[3], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
redis.call("ZADD", KEYS[4], ARGV[3], ARGV[1])
local old = redis.call("ZRANGE", KEYS[4], "-inf", ARGV[4], "BYSCORE")
if #old > 0 then
	for _, id in ipairs(old) do
		redis.call("DEL", KEYS[9] .. id)
	end
	redis.call("ZREM", KEYS[4], unpack(old))
end

local extra = redis.call("ZRANGE", KEYS[4], 0, -ARGV[5])
if #extra > 0 then
	for _, id in ipairs(extra) do
		redis.call("DEL", KEYS[9] .. id)
	end
	redis.call("ZREM", KEYS[4], unpack(extra))
end

redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "archived")
local n = redis.call("INCR", KEYS[5])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[5], ARGV[6])
end
local m = redis.call("INCR", KEYS[6])
if tonumber(m) == 1 then
	redis.call("EXPIREAT", KEYS[6], ARGV[6])
end
local total = redis.call("GET", KEYS[7])
if tonumber(total) == tonumber(ARGV[7]) then
   	redis.call("SET", KEYS[7], 1)
   	redis.call("SET", KEYS[8], 1)
else
  	redis.call("INCR", KEYS[7])
   	redis.call("INCR", KEYS[8])
end
return redis.status_reply("OK")`

// Requeue: asynq's shutdown put the task back to pending.
// (requeueCmd)
const asynqRequeueSource = `
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
redis.call("RPUSH", KEYS[3], ARGV[1])
redis.call("HSET", KEYS[4], "state", "pending")
return redis.status_reply("OK")`

// ListLeaseExpired: asynq's recoverer lists the tasks whose lease ran out.
// (listLeaseExpiredCmd)
const asynqListLeaseExpiredSource = `
local res = {}
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1])
for _, id in ipairs(ids) do
	local key = ARGV[2] .. id
	local v = redis.call("HGET", key, "msg")
	if v then
		table.insert(res, v)
	end
end
return res
`
