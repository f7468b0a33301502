package health

import "github.com/redis/go-redis/v9"

// ownerCheck is the owner test of writeScript and setPIDScript: only the
// holder of a slot's lease writes its record (TestWriteChecksTheOwner,
// TestSetPID). With an owner given (a lease value, "<host>/<instance>"), a write goes through
// only if the slot's lease is that owner's, or if the lease is gone (it
// expired during an outage, or Redis lost its data) and the record names no
// other instance (it is absent, re-created by a worker's heartbeat without
// one, or the owner's own). Otherwise it returns {-1, holder}.
// KEYS[1] is the component hash, KEYS[2] the slot lease; owner is a Lua
// variable, empty for no check.
const ownerCheck = `
if owner ~= '' then
  local l = redis.call('GET', KEYS[2])
  if l then
    if l ~= owner then return {-1, l} end
  else
    local f = redis.call('HMGET', KEYS[1], 'host', 'instance')
    if f[2] and f[2] ~= '' and ((f[1] or '') .. '/' .. f[2]) ~= owner then return {-1, (f[1] or '') .. '/' .. f[2]} end
  end
end
`

// bumpRev is the revision step of every script that writes a record
// (FieldRev): rev becomes max(rev+1, Redis's TIME in µs), so that it grows
// with every write and a record re-created from nothing (Redis lost it, or
// a removed slot grown back) starts above the one it replaces. Redis's
// clock, not the writer's: a re-creating write may carry a stamp from
// before the loss (the supervisor writes its last record back), or come
// from a host whose clock is behind the one that wrote the lost rev; its
// rev would then start below, and the broker and the dashboard, which keep
// the views they showed across the loss, would drop its updates as older.
// It returns the new rev as a string (a Lua number would print as
// 1.79e+15). KEYS[1] is the component hash.
const bumpRev = `
local function bump_rev()
  local r = tonumber(redis.call('HGET', KEYS[1], 'rev') or '') or 0
  local tm = redis.call('TIME')
  local t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  if t > r then r = t else r = r + 1 end
  local s = string.format('%.0f', r)
  redis.call('HSET', KEYS[1], 'rev', s)
  return s
end
local function worker_fields()
  local f = redis.call('HMGET', KEYS[1], 'rev', 'current_job', 'current_seq')
  return f[1] or '', f[2] or '', f[3] or ''
end
`

// writeScript stores a component's record and restart history in one atomic
// step, after checking that the writer owns the slot (ownerCheck) and that
// the stored status may change as asked.
//
// KEYS: component hash, slot lease, restarts hash, crash window, heartbeat
// key (one hash tag: one Redis Cluster slot).
// ARGV[1]: JSON {owner: lease value or absent (no owner check), from:
// [state…] or absent (no status check), set: {field: value}, del:
// [field…], restarts: {field: value} or absent, crashes: [[score,
// member]…] (replaces the window when restarts is present), del_hb: bool}.
// Returns {1, previous state, rev, current_job, current_seq} on success
// (the record's, after the write: the event of the write carries them),
// {0, current state} when the status machine refuses, {-1, lease holder}
// when the writer is not the owner. A write sets rev (bumpRev).
//
// An owner's write over a record the owner did not write is not checked
// against the status machine, which guards a writer's own history: a
// record of another instance (a previous owner's, which this owner's
// takeover write, held during an outage, never replaced:
// TestOwnerWritesOverAPreviousOwnersRecord) or of none (re-created by a
// worker's heartbeat after Redis lost its data:
// TestOwnerWritesOverARecordTheHeartbeatRecreated). Refused from such a
// record, a restart would leave the slot stopped, or in backoff, for good.
// The owner check comes first: the lease says whose the slot is. A record
// stopped and held, or failed, is checked whoever wrote it: only an
// operator's action ends those, and a host that took a lapsed lease again
// has a view older than a hold the slot's holder meanwhile wrote
// (TestOwnerDoesNotWriteOverAnotherInstancesHoldOrFailure).
//
// A write the status machine would refuse but that finds the record
// already as it would leave it (every field it sets equal, every field it
// deletes absent; updated_at, in ms, makes two writes differ) is the same
// write, applied once: it is applied again and succeeds. That is what a
// retry finds when the reply of the first attempt was lost (go-redis
// retries a script whose connection closed); refusing it would leave a
// claimed slot starting with no process
// (TestWriteRetriedAfterALostReplySucceeds). The worker's own fields
// (last_heartbeat, current_job, current_seq, version) are left out of that
// comparison: a stale process of the slot (the previous holder's, running
// on after Redis lost the leases) sets its current job with a plain HSET,
// and may do so between the first attempt and the retry
// (TestWriteRetriedAfterALostReplyOverAStaleWorkersJobSucceeds). The write
// applied again clears them as it says.
var writeScript = redis.NewScript(bumpRev + `
local a = cjson.decode(ARGV[1])
local owner = a.owner or ''
` + ownerCheck + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then st = '' end
local tok = st
if st == 'stopped' and redis.call('HGET', KEYS[1], 'held') == '1' then tok = 'stopped+held' end
-- The status machine guards a record against its own writer's history.
-- A record the owner did not write (another instance's, left by a previous
-- owner; or one without an instance, re-created by a worker's heartbeat
-- after Redis lost its data) has no history of the owner's to guard: the
-- owner's write goes through (see writeScript's comment). Not over a hold
-- or a failure: only an operator's action ends those, whoever wrote them
-- (a host whose lease lapsed and was taken again has a view older than a
-- hold written meanwhile by the host that held the slot).
if a.from and owner ~= '' and st ~= '' and tok ~= 'stopped+held' and st ~= 'failed' then
  local f = redis.call('HMGET', KEYS[1], 'host', 'instance')
  if (f[1] or '') .. '/' .. (f[2] or '') ~= owner then a.from = nil end
end
if a.from then
  local ok = false
  for _, f in ipairs(a.from) do if f == tok then ok = true break end end
  if not ok then
    -- The same write, applied once already (its reply lost)? The
    -- worker's own fields do not tell: a stale process of the slot may
    -- have set them since. It is applied again: what it clears, a stale
    -- worker set.
    local wf = {last_heartbeat = true, current_job = true, current_seq = true, version = true}
    local same = true
    for k, v in pairs(a.set) do
      if not wf[k] and redis.call('HGET', KEYS[1], k) ~= v then same = false break end
    end
    if same and a.del then
      for _, f in ipairs(a.del) do
        if not wf[f] and redis.call('HEXISTS', KEYS[1], f) == 1 then same = false break end
      end
    end
    if not same then return {0, tok} end
  end
end
local args = {}
for k, v in pairs(a.set) do args[#args+1] = k; args[#args+1] = v end
if #args > 0 then redis.call('HSET', KEYS[1], unpack(args)) end
if a.del then for _, f in ipairs(a.del) do redis.call('HDEL', KEYS[1], f) end end
-- created_at: the first registration, set once
if a.set.updated_at and a.set.updated_at ~= '' then redis.call('HSETNX', KEYS[1], 'created_at', a.set.updated_at) end
if a.restarts then
  args = {}
  for k, v in pairs(a.restarts) do args[#args+1] = k; args[#args+1] = v end
  redis.call('DEL', KEYS[3])
  if #args > 0 then redis.call('HSET', KEYS[3], unpack(args)) end
  redis.call('DEL', KEYS[4])
  if a.crashes then for _, c in ipairs(a.crashes) do redis.call('ZADD', KEYS[4], c[1], c[2]) end end
end
if a.del_hb then redis.call('DEL', KEYS[5]) end
bump_rev()
local rev, cj, cs = worker_fields()
return {1, tok, rev, cj, cs}
`)

// heartbeatScript is the worker's heartbeat (docs/design.md §4.2), one round trip.
//
// KEYS: heartbeat key, component hash.
// ARGV: pid, now ms, ttl ms, host, queue, slot, started_at ms, and
// optionally recover_for ms, reason, recover_min ms, recover_max ms (0 and
// empty strings for an ordinary beat), version (the worker's, recorded
// when it differs; empty: none).
// Returns {code, status}: code -1 stale (another pid owns the record, or the
// record says the process is not running: the writer must exit), 0 beat
// written, 1 beat written and starting or recovering → healthy, 2 record
// re-created, 3 pending: the record is starting without a pid (the
// supervisor writes it before the fork and the pid right after), nothing
// written, try again, 4 beat written and the worker recovering, with a
// third element, the window in ms.
// A starting record without a pid is never adopted: a stale process (a
// fenced worker, an orphan of a killed supervisor) would take the new
// child's place (TestBeatDoesNotAdoptStartingWithoutPID).
//
// A recover_for above 0 opens (or moves) a recovering window
// (TestRecoverWindowThenBeatIsHealthy, TestRecoverWindowClamped): it is
// clamped to [recover_min, recover_max] (5 s and 120 s when absent), the
// key lives that long (the TTL when longer), and the record says
// recovering, with the reason and recovering_until. The supervisor judges
// the key as ever: it expires at the window's end unless beaten, and a key
// gone is a hang. The next ordinary beat makes the worker healthy again. A
// stopping worker's recover_for is an ordinary beat.
//
// A beat that changes the status (the ones announced: codes 1, 2 and 4)
// sets the record's rev as bumpRev does; a plain beat leaves it: rev moves
// with the changes that have an event, so that a snapshot read between two
// of them has the rev of the last event (a client compares them).
var heartbeatScript = redis.NewScript(`
local pid = redis.call('HGET', KEYS[2], 'pid')
local st = redis.call('HGET', KEYS[2], 'status')
if pid and pid ~= ARGV[1] then return {-1, st or ''} end
if pid and st ~= 'starting' and st ~= 'healthy' and st ~= 'recovering' and st ~= 'stopping' then return {-1, st or ''} end
if not pid and st == 'starting' then return {3, st} end
-- no pid and no record: Redis lost its data: re-create it. Anything else
-- is not ours.
if not pid and st then return {-1, st} end
local px = math.floor(tonumber(ARGV[3]))
local rf = math.floor(tonumber(ARGV[8] or '') or 0)
if rf > 0 and st ~= 'stopping' then
  local lo = math.floor(tonumber(ARGV[10] or '') or 5000)
  local hi = math.floor(tonumber(ARGV[11] or '') or 120000)
  if rf < lo then rf = lo end
  if rf > hi then rf = hi end
  if rf > px then px = rf end
else
  rf = 0
end
local now = ARGV[2]
redis.call('SET', KEYS[1], now, 'PX', px)
local function bump_rev()
  local r = tonumber(redis.call('HGET', KEYS[2], 'rev') or '') or 0
  local tm = redis.call('TIME')
  local t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  if t > r then r = t else r = r + 1 end
  redis.call('HSET', KEYS[2], 'rev', string.format('%.0f', r))
end
local ver = ARGV[12] or ''
if ver ~= '' and redis.call('HGET', KEYS[2], 'version') ~= ver then redis.call('HSET', KEYS[2], 'version', string.sub(ver, 1, 100)) end
local status = 'healthy'
if rf > 0 then status = 'recovering' end
if not pid then
  redis.call('HSET', KEYS[2], 'status', status, 'pid', ARGV[1], 'host', ARGV[4], 'queue', ARGV[5],
    'slot', ARGV[6], 'started_at', ARGV[7], 'healthy_since', now, 'last_heartbeat', now,
    'updated_at', now, 'held', '0')
  redis.call('HSETNX', KEYS[2], 'created_at', now)
  if rf > 0 then
    redis.call('HSET', KEYS[2], 'reason', string.sub(ARGV[9] or '', 1, 200), 'recovering_until', tostring(tonumber(now) + px))
  end
  bump_rev()
  return {2, status}
end
if rf > 0 then
  redis.call('HSET', KEYS[2], 'status', 'recovering', 'reason', string.sub(ARGV[9] or '', 1, 200),
    'recovering_until', tostring(tonumber(now) + px), 'last_heartbeat', now, 'updated_at', now)
  if st == 'starting' then redis.call('HSET', KEYS[2], 'healthy_since', now) end
  bump_rev()
  return {4, 'recovering', px}
end
if st == 'starting' then
  redis.call('HSET', KEYS[2], 'status', 'healthy', 'healthy_since', now, 'last_heartbeat', now, 'updated_at', now)
  bump_rev()
  return {1, 'healthy'}
end
if st == 'recovering' then
  redis.call('HSET', KEYS[2], 'status', 'healthy', 'reason', '', 'last_heartbeat', now, 'updated_at', now)
  redis.call('HDEL', KEYS[2], 'recovering_until')
  bump_rev()
  return {1, 'healthy'}
end
redis.call('HSET', KEYS[2], 'last_heartbeat', now)
return {0, st}
`)

// setPIDScript records the pid of a just-spawned process in its starting
// record, if the writer owns the slot (ownerCheck) and the record names no
// other process.
// KEYS: component hash, slot lease. ARGV: pid, owner (lease value, empty
// for no owner check).
// Returns {1, "", rev, current_job, current_seq} recorded, {0, pid} the
// record names another pid, {-1, holder} not the owner, {-2, ""} no record
// (Redis lost its data).
var setPIDScript = redis.NewScript(bumpRev + `
local owner = ARGV[2]
` + ownerCheck + `
if not redis.call('HGET', KEYS[1], 'status') then return {-2, ''} end
local cur = redis.call('HGET', KEYS[1], 'pid')
if cur and cur ~= ARGV[1] then return {0, cur} end
redis.call('HSET', KEYS[1], 'pid', ARGV[1])
bump_rev()
local rev, cj, cs = worker_fields()
return {1, '', rev, cj, cs}
`)
