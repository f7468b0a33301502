package health

import "github.com/redis/go-redis/v9"

// writeScript stores a component's record and restart history in one atomic
// step, after checking that the stored status may change as asked.
//
// KEYS: component hash, restarts hash, crash window, heartbeat key.
// ARGV[1]: JSON {from: [state…] or absent (no check), set: {field: value},
// del: [field…], restarts: {field: value} or absent, crashes: [[score,
// member]…] (replaces the window when restarts is present), del_hb: bool}.
// Returns {1, previous state} on success, {0, current state} when refused.
var writeScript = redis.NewScript(`
local a = cjson.decode(ARGV[1])
local st = redis.call('HGET', KEYS[1], 'status')
if not st then st = '' end
local tok = st
if st == 'stopped' and redis.call('HGET', KEYS[1], 'held') == '1' then tok = 'stopped+held' end
if a.from then
  local ok = false
  for _, f in ipairs(a.from) do if f == tok then ok = true break end end
  if not ok then return {0, tok} end
end
local args = {}
for k, v in pairs(a.set) do args[#args+1] = k; args[#args+1] = v end
if #args > 0 then redis.call('HSET', KEYS[1], unpack(args)) end
if a.del then for _, f in ipairs(a.del) do redis.call('HDEL', KEYS[1], f) end end
if a.restarts then
  args = {}
  for k, v in pairs(a.restarts) do args[#args+1] = k; args[#args+1] = v end
  redis.call('DEL', KEYS[2])
  if #args > 0 then redis.call('HSET', KEYS[2], unpack(args)) end
  redis.call('DEL', KEYS[3])
  if a.crashes then for _, c in ipairs(a.crashes) do redis.call('ZADD', KEYS[3], c[1], c[2]) end end
end
if a.del_hb then redis.call('DEL', KEYS[4]) end
return {1, tok}
`)

// heartbeatScript is the worker's heartbeat (DESIGN.md §4.2), one round trip.
//
// KEYS: heartbeat key, component hash.
// ARGV: pid, now ms, ttl ms, host, queue, slot, started_at ms.
// A record in starting with no pid yet is adopted (the supervisor writes it
// before the fork and the pid right after).
// Returns {code, status}: code -1 stale (another pid owns the record, or the
// record says the process is not running: the writer must exit), 0 beat
// written, 1 beat written and starting → healthy, 2 record re-created.
var heartbeatScript = redis.NewScript(`
local pid = redis.call('HGET', KEYS[2], 'pid')
local st = redis.call('HGET', KEYS[2], 'status')
if pid and pid ~= ARGV[1] then return {-1, st or ''} end
if pid and st ~= 'starting' and st ~= 'healthy' and st ~= 'stopping' then return {-1, st or ''} end
-- no pid: no record (Redis lost its data), or a record the supervisor wrote
-- just before spawning this process: adopt it. Anything else is not ours.
if not pid and st and st ~= 'starting' then return {-1, st} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if not pid then
  redis.call('HSET', KEYS[2], 'status', 'healthy', 'pid', ARGV[1], 'host', ARGV[4], 'queue', ARGV[5],
    'slot', ARGV[6], 'started_at', ARGV[7], 'healthy_since', ARGV[2], 'last_heartbeat', ARGV[2],
    'updated_at', ARGV[2], 'held', '0')
  return {2, 'healthy'}
end
if st == 'starting' then
  redis.call('HSET', KEYS[2], 'status', 'healthy', 'healthy_since', ARGV[2], 'last_heartbeat', ARGV[2], 'updated_at', ARGV[2])
  return {1, 'healthy'}
end
redis.call('HSET', KEYS[2], 'last_heartbeat', ARGV[2])
return {0, st}
`)

// setPIDScript records the pid of a just-spawned process unless the record
// already names another one. KEYS: component hash. ARGV: pid.
var setPIDScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'pid')
if cur and cur ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'pid', ARGV[1])
return 1
`)
