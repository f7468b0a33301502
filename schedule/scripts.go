package schedule

import "github.com/redis/go-redis/v9"

// Fields of a schedule's record (health.Keys.Schedule).
const (
	fDef         = "def"           // the Definition, JSON
	fRev         = "rev"           // bumped by every change of def or paused
	fPaused      = "paused"        // "1" while paused
	fSince       = "since"         // ms: only ticks after it are this definition's
	fLastTick    = "last_tick"     // ms: the last tick decided (fired or skipped); never goes back
	fLastFired   = "last_fired"    // ms: the last tick that enqueued a task
	fLastFiredAt = "last_fired_at" // ms: when the last task (tick or trigger) was enqueued
	fLastTask    = "last_task"     // id of the last task enqueued
	fTasks       = "tasks"         // the last task ids, newest first, comma-separated
	fFires       = "fires"         // tasks enqueued
	fSkipped     = "skipped"       // ticks skipped (catch-up policy, unique lock)
	fCreatedAt   = "created_at"    // ms
	fUpdatedAt   = "updated_at"    // ms
	// fOp is the random token of the last create, update, move or pause
	// that changed the record: a script sent again by go-redis after its
	// reply was lost finds its own token and answers as the first run did
	// (see createScript).
	fOp = "op"
)

// Replies of the fire and skip scripts.
const (
	resEnqueued  = "enqueued"  // the tick's task is in the queue
	resDuplicate = "duplicate" // asynq's uniqueness lock is held: tick decided, nothing enqueued
	resConflict  = "conflict"  // a task with the tick's id exists: tick decided, nothing enqueued
	resSkipped   = "skipped"   // the tick is decided as skipped
	resMoved     = "moved"     // another fire decided ticks since the caller read the schedule: nothing written
	resStale     = "stale"     // the definition changed since it was read: nothing written
	resPaused    = "paused"    // the schedule is paused: nothing written
	resGone      = "gone"      // the schedule is deleted: nothing written
)

// fireScript enqueues one task of a schedule and, for a tick, records the
// tick as decided, in one step: a tick is enqueued at most once whoever
// runs it, however often, even after its task completed and was deleted.
// A tick's fire is a compare-and-set on the last decided tick: it applies
// only if no other fire decided a tick since the caller read the schedule
// (else "moved", with the last tick, and the caller plans again), so that
// the ticks a catch-up policy skips are decided, and counted, once.
// The enqueue is asynq v0.26.0's enqueueCmd, or enqueueUniqueCmd with a
// fourth key, statement for statement.
//
// KEYS: record, asynq task key, asynq pending list, [asynq unique key].
// ARGV: 1 rev read with the definition ("" for a trigger: no checks),
// 2 tick ms ("" for a trigger), 3 task id, 4 encoded task message,
// 5 now ns (pending_since), 6 now ms, 7 unique TTL s, 8 task ids kept,
// 9 ticks skipped by this decision (counted), 10 the last tick ms the
// caller read ("0" for none).
// Returns {reply, last tick ms}.
var fireScript = redis.NewScript(`
local rec = KEYS[1]
if redis.call("EXISTS", rec) == 0 then
	return {"gone", 0}
end
local tick = ARGV[2] ~= ""
-- A trigger's task with this very message (its id is random) is this
-- trigger's, enqueued by a first run whose reply was lost (go-redis sends
-- the script again): answered as that run was, not as a conflict (the
-- operator, told it failed, triggered again). A tick's retry finds the
-- tick decided ("moved") and plans again: only its event is lost, and two
-- leaders of a moment would enqueue the same message.
if not tick and redis.call("HGET", KEYS[2], "msg") == ARGV[4] then
	return {"enqueued", 0}
end
if tick then
	if redis.call("HGET", rec, "rev") ~= ARGV[1] then
		return {"stale", 0}
	end
	if redis.call("HGET", rec, "paused") == "1" then
		return {"paused", 0}
	end
	local last = redis.call("HGET", rec, "last_tick") or "0"
	if last ~= ARGV[10] then
		return {"moved", tonumber(last)}
	end
end
local res = "enqueued"
if #KEYS == 4 then
	local ok = redis.call("SET", KEYS[4], ARGV[3], "NX", "EX", ARGV[7])
	if not ok then
		res = "duplicate"
	end
end
if res == "enqueued" and redis.call("EXISTS", KEYS[2]) == 1 then
	res = "conflict"
end
if res == "enqueued" then
	if #KEYS == 4 then
		redis.call("HSET", KEYS[2],
		           "msg", ARGV[4],
		           "state", "pending",
		           "pending_since", ARGV[5],
		           "unique_key", KEYS[4])
	else
		redis.call("HSET", KEYS[2],
		           "msg", ARGV[4],
		           "state", "pending",
		           "pending_since", ARGV[5])
	end
	redis.call("LPUSH", KEYS[3], ARGV[3])
	local ids = {ARGV[3]}
	local old = redis.call("HGET", rec, "tasks")
	if old then
		for id in string.gmatch(old, "[^,]+") do
			if #ids >= tonumber(ARGV[8]) then
				break
			end
			ids[#ids + 1] = id
		end
	end
	redis.call("HSET", rec, "last_task", ARGV[3], "last_fired_at", ARGV[6], "tasks", table.concat(ids, ","))
	redis.call("HINCRBY", rec, "fires", 1)
end
if not tick then
	return {res, 0}
end
redis.call("HSET", rec, "last_tick", ARGV[2])
if res == "enqueued" then
	redis.call("HSET", rec, "last_fired", ARGV[2])
end
local skipped = tonumber(ARGV[9])
if res == "duplicate" then
	skipped = skipped + 1
end
if skipped > 0 then
	redis.call("HINCRBY", rec, "skipped", skipped)
end
return {res, tonumber(ARGV[2])}
`)

// skipScript records ticks up to one as decided without enqueuing
// anything (a catch-up policy skipped them).
//
// KEYS: record. ARGV: 1 rev, 2 tick ms, 3 ticks skipped, 4 the last tick
// ms the caller read ("0" for none).
// Returns {reply, last tick ms}.
var skipScript = redis.NewScript(`
local rec = KEYS[1]
if redis.call("EXISTS", rec) == 0 then
	return {"gone", 0}
end
if redis.call("HGET", rec, "rev") ~= ARGV[1] then
	return {"stale", 0}
end
if redis.call("HGET", rec, "paused") == "1" then
	return {"paused", 0}
end
local last = redis.call("HGET", rec, "last_tick") or "0"
if last ~= ARGV[4] then
	return {"moved", tonumber(last)}
end
redis.call("HSET", rec, "last_tick", ARGV[2])
redis.call("HINCRBY", rec, "skipped", ARGV[3])
return {"skipped", tonumber(ARGV[2])}
`)

// createScript writes a new record (field, value, … in ARGV, the
// operation's token, fOp, among them) unless one exists. Returns 1 if
// written, or if the record is this very write's: go-redis sends a script
// again when its connection closed before the reply, and the first run
// had applied it: answered "exists", the create would tell no leader of
// the new schedule (TestOperationRetriedAfterALostReplyIsApplied).
var createScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 1 then
	for i = 1, #ARGV - 1, 2 do
		if ARGV[i] == "op" then
			if redis.call("HGET", KEYS[1], "op") == ARGV[i + 1] then
				return 1
			end
			break
		end
	end
	return 0
end
redis.call("HSET", KEYS[1], unpack(ARGV))
return 1
`)

// updateScript replaces a record's definition. ARGV: 1 def, 2 now ms,
// 3 "1" when the spec changed (its ticks start now), 4 the operation's
// token. Returns the new rev (the same again for a run of the same
// token: see createScript), or -1 when there is no record.
var updateScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then
	return -1
end
if redis.call("HGET", KEYS[1], "op") == ARGV[4] then
	return tonumber(redis.call("HGET", KEYS[1], "rev"))
end
redis.call("HSET", KEYS[1], "def", ARGV[1], "updated_at", ARGV[2], "op", ARGV[4])
if ARGV[3] == "1" then
	redis.call("HSET", KEYS[1], "since", ARGV[2])
end
return redis.call("HINCRBY", KEYS[1], "rev", 1)
`)

// pauseScript sets paused. ARGV: 1 "1" or "0", 2 now ms, 3 the
// operation's token. A resume starts the ticks anew from now (those of
// the pause are never fired). Returns the new rev, 0 when nothing
// changed, -1 when there is no record. A run of the same token finds the
// change its own and returns the rev again (see createScript: a resume
// whose reply was lost, answered "unchanged", would tell no leader, which
// would keep the schedule paused;
// TestOperationRetriedAfterALostReplyIsApplied).
var pauseScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then
	return -1
end
if (redis.call("HGET", KEYS[1], "paused") or "0") == ARGV[1] then
	if redis.call("HGET", KEYS[1], "op") == ARGV[3] then
		return tonumber(redis.call("HGET", KEYS[1], "rev"))
	end
	return 0
end
redis.call("HSET", KEYS[1], "paused", ARGV[1], "updated_at", ARGV[2], "op", ARGV[3])
if ARGV[1] == "0" then
	redis.call("HSET", KEYS[1], "since", ARGV[2])
end
return redis.call("HINCRBY", KEYS[1], "rev", 1)
`)

// takeScript deletes a record and returns its fields (a delete, or the
// first half of a move to another queue: a fire after it finds no record).
// The record is kept a minute under KEYS[2] (Keys.ScheduleTaken), with
// the operation's token: a run of the same token (go-redis sends a script
// again when its reply was lost) returns the same fields. Else a move
// whose take was applied but not answered would find nothing and lose the
// schedule (TestOperationRetriedAfterALostReplyIsApplied).
// KEYS: record, its taken copy. ARGV: 1 the operation's token.
var takeScript = redis.NewScript(`
if redis.call("HGET", KEYS[2], "#taken_by") ~= ARGV[1] then
	-- Not taken by this operation yet (a record created since its first
	-- run, which a retry must not take, is another's).
	if redis.call("EXISTS", KEYS[1]) == 0 then
		return {}
	end
	local v = redis.call("HGETALL", KEYS[1])
	redis.call("RENAME", KEYS[1], KEYS[2])
	redis.call("HSET", KEYS[2], "#taken_by", ARGV[1])
	redis.call("PEXPIRE", KEYS[2], 60000)
	return v
end
local all = redis.call("HGETALL", KEYS[2])
local v = {}
for i = 1, #all - 1, 2 do
	if all[i] ~= "#taken_by" then
		v[#v + 1] = all[i]
		v[#v + 1] = all[i + 1]
	end
end
return v
`)
