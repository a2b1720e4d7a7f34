# The stand's script bodies (stand/scripts/*.lua) as module attributes, for
# the test that pins them from Elixir. Rewrite with:
#   go test ./pin -run TestPinStandElixir -update
defmodule Stand.ScriptsPlain do
  @enqueue "-- ENQUEUE  keys: P job:<id>, P pending  values: id, payload\n\
-- A new job: row {state pending, attempts 0, payload}, id in pending at\n\
-- score 0. Replies 1 when new, 0 when the row already existed.\n\
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.ENQUEUE wants 2 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.ENQUEUE wants 2 values, got ' .. #ARGV) end\n\
local id, payload = ARGV[1], ARGV[2]\n\
if KEYS[1] ~= (string.match(KEYS[2], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.ENQUEUE key 1 must be job:<id>')\n\
end\n\
\n\
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n\
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', 0, 'payload', payload)\n\
redis.call('ZADD', KEYS[2], 0, id)\n\
return 1\n\
"

  @claim2 "-- CLAIM  keys: P pending, P active  values: lease_ms\n\
-- Pops the lowest pending id, leases it until now+lease_ms and counts the\n\
-- attempt. An orphan id (no row) is dropped and the next one tried.\n\
-- Replies [id, payload, attempts], or [] when nothing is pending. The pause\n\
-- flag is the host's business: it reads it before sending this script.\n\
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.CLAIM wants 2 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.CLAIM wants 1 values, got ' .. #ARGV) end\n\
local function int(j, min)\n\
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')\n\
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end\n\
  local n = tonumber(digits) or 0\n\
  if n < min or n >= 9007199254740992 then return nil end\n\
  return n\n\
end\n\
local lease = int(1, 0)\n\
if not lease then return redis.error_reply('EMQWIRE EMQ.CLAIM value 1 must be an integer') end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
local prefix = string.match(KEYS[1], '^(.*:)') or ''\n\
while true do\n\
  local popped = redis.call('ZPOPMIN', KEYS[1])\n\
  if #popped == 0 then return {} end\n\
  local id = popped[1]\n\
  local row = prefix .. 'job:' .. id\n\
  if redis.call('EXISTS', row) == 1 then\n\
    redis.call('ZADD', KEYS[2], now + lease, id)\n\
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)\n\
    redis.call('HSET', row, 'state', 'active')\n\
    return {id, redis.call('HGET', row, 'payload'), attempts}\n\
  end\n\
end\n\
"

  @extend "-- EXTEND  keys: P active, P job:<id>  values: id, lease_ms\n\
-- An active id gets the deadline now+lease_ms. Replies the new deadline,\n\
-- or 0 when the id is not active. An active id with no row (an orphan) is\n\
-- dropped from active and replies 0.\n\
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 values, got ' .. #ARGV) end\n\
local function int(j, min)\n\
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')\n\
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end\n\
  local n = tonumber(digits) or 0\n\
  if n < min or n >= 9007199254740992 then return nil end\n\
  return n\n\
end\n\
local id = ARGV[1]\n\
local lease = int(2, 0)\n\
if not lease then return redis.error_reply('EMQWIRE EMQ.EXTEND value 2 must be an integer') end\n\
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.EXTEND key 2 must be job:<id>')\n\
end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end\n\
if redis.call('EXISTS', KEYS[2]) == 0 then -- an orphan: dropped, no row written\n\
  redis.call('ZREM', KEYS[1], id)\n\
  return 0\n\
end\n\
local deadline = now + lease\n\
redis.call('ZADD', KEYS[1], 'XX', deadline, id)\n\
return deadline\n\
"

  @complete "-- COMPLETE  keys: P active, P job:<id>, P done  values: id\n\
-- An active id leaves active, its row says done, and it enters done at now.\n\
-- Replies 1, or 0 when the id is not active. An active id with no row (an\n\
-- orphan) is dropped from active and replies 0.\n\
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 3 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 1 values, got ' .. #ARGV) end\n\
local id = ARGV[1]\n\
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.COMPLETE key 2 must be job:<id>')\n\
end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end\n\
redis.call('ZREM', KEYS[1], id)\n\
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written\n\
redis.call('HSET', KEYS[2], 'state', 'done')\n\
redis.call('ZADD', KEYS[3], now, id)\n\
return 1\n\
"

  @fail "-- FAIL  keys: P active, P job:<id>, P delayed, P dead\n\
--       values: id, error, max_attempts, backoff_ms\n\
-- An active id leaves active and its row records the error. Below\n\
-- max_attempts it is delayed until now+backoff_ms (replies that run-at),\n\
-- otherwise it is dead (replies 0). Replies -1 when the id is not active;\n\
-- an active id with no row (an orphan) is dropped from active and replies -1.\n\
if #KEYS ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 values, got ' .. #ARGV) end\n\
local function int(j, min)\n\
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')\n\
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end\n\
  local n = tonumber(digits) or 0\n\
  if n < min or n >= 9007199254740992 then return nil end\n\
  return n\n\
end\n\
local id, err = ARGV[1], ARGV[2]\n\
local max = int(3, 0)\n\
if not max then return redis.error_reply('EMQWIRE EMQ.FAIL value 3 must be an integer') end\n\
local backoff = int(4, 0)\n\
if not backoff then return redis.error_reply('EMQWIRE EMQ.FAIL value 4 must be an integer') end\n\
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.FAIL key 2 must be job:<id>')\n\
end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
if not redis.call('ZSCORE', KEYS[1], id) then return -1 end\n\
redis.call('ZREM', KEYS[1], id)\n\
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end -- an orphan: dropped, no row written\n\
local attempts = tonumber(redis.call('HGET', KEYS[2], 'attempts')) or 0\n\
if attempts < max then\n\
  local run_at = now + backoff\n\
  redis.call('HSET', KEYS[2], 'state', 'delayed', 'error', err)\n\
  redis.call('ZADD', KEYS[3], run_at, id)\n\
  return run_at\n\
end\n\
redis.call('HSET', KEYS[2], 'state', 'dead', 'error', err)\n\
redis.call('ZADD', KEYS[4], now, id)\n\
return 0\n\
"

  @retry "-- RETRY  keys: P dead, P job:<id>, P pending  values: id\n\
-- A dead id goes back to pending with attempts 0 and no error.\n\
-- Replies 1, or 0 when the id is not dead. A dead id with no row (an\n\
-- orphan) is dropped from dead and replies 0.\n\
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 3 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 1 values, got ' .. #ARGV) end\n\
local id = ARGV[1]\n\
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.RETRY key 2 must be job:<id>')\n\
end\n\
\n\
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end\n\
redis.call('ZREM', KEYS[1], id)\n\
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written\n\
redis.call('HSET', KEYS[2], 'state', 'pending', 'attempts', 0)\n\
redis.call('HDEL', KEYS[2], 'error')\n\
redis.call('ZADD', KEYS[3], 0, id)\n\
return 1\n\
"

  @cancel "-- CANCEL  keys: P pending, P delayed, P job:<id>  values: id\n\
-- A pending or delayed id leaves its set and its row says cancelled.\n\
-- Replies 1, or 0 when the id is neither pending nor delayed. Such an id\n\
-- with no row (an orphan) is dropped from its set and replies 0.\n\
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 3 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 1 values, got ' .. #ARGV) end\n\
local id = ARGV[1]\n\
if KEYS[3] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.CANCEL key 3 must be job:<id>')\n\
end\n\
\n\
local pending = redis.call('ZSCORE', KEYS[1], id)\n\
local delayed = redis.call('ZSCORE', KEYS[2], id)\n\
if not pending and not delayed then return 0 end\n\
if pending then redis.call('ZREM', KEYS[1], id) end\n\
if delayed then redis.call('ZREM', KEYS[2], id) end\n\
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end -- an orphan: dropped, no row written\n\
redis.call('HSET', KEYS[3], 'state', 'cancelled')\n\
return 1\n\
"

  @promote "-- PROMOTE  keys: P delayed, P pending  values: limit\n\
-- Up to limit delayed ids whose run-at is due (score <= now), lowest first,\n\
-- move to pending at score 0 and their rows say pending. An orphan id is\n\
-- dropped, uses one place of the limit and is not counted.\n\
-- Replies the number of jobs moved.\n\
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 2 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 1 values, got ' .. #ARGV) end\n\
local function int(j, min)\n\
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')\n\
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end\n\
  local n = tonumber(digits) or 0\n\
  if n < min or n >= 9007199254740992 then return nil end\n\
  return n\n\
end\n\
local limit = int(1, 1)\n\
if not limit then return redis.error_reply('EMQWIRE EMQ.PROMOTE value 1 must be an integer') end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
local prefix = string.match(KEYS[1], '^(.*:)') or ''\n\
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),\n\
  'LIMIT', 0, string.format('%d', limit))\n\
local moved = 0\n\
for _, id in ipairs(ids) do\n\
  local row = prefix .. 'job:' .. id\n\
  redis.call('ZREM', KEYS[1], id)\n\
  if redis.call('EXISTS', row) == 1 then\n\
    redis.call('ZADD', KEYS[2], 0, id)\n\
    redis.call('HSET', row, 'state', 'pending')\n\
    moved = moved + 1\n\
  end\n\
end\n\
return moved\n\
"

  @reap "-- REAP  keys: P active, P pending, P dead  values: limit, max_attempts\n\
-- Up to limit active ids whose lease has expired (deadline < now), lowest\n\
-- first, leave active. One that has used max_attempts dies with the error\n\
-- lease-expired; the others go back to pending. An orphan id is dropped,\n\
-- uses one place of the limit and is not counted.\n\
-- Replies the number of jobs reaped.\n\
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.REAP wants 3 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.REAP wants 2 values, got ' .. #ARGV) end\n\
local function int(j, min)\n\
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')\n\
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end\n\
  local n = tonumber(digits) or 0\n\
  if n < min or n >= 9007199254740992 then return nil end\n\
  return n\n\
end\n\
local limit = int(1, 1)\n\
if not limit then return redis.error_reply('EMQWIRE EMQ.REAP value 1 must be an integer') end\n\
local max = int(2, 0)\n\
if not max then return redis.error_reply('EMQWIRE EMQ.REAP value 2 must be an integer') end\n\
\n\
local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
local prefix = string.match(KEYS[1], '^(.*:)') or ''\n\
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now),\n\
  'LIMIT', 0, string.format('%d', limit))\n\
local reaped = 0\n\
for _, id in ipairs(ids) do\n\
  local row = prefix .. 'job:' .. id\n\
  redis.call('ZREM', KEYS[1], id)\n\
  if redis.call('EXISTS', row) == 1 then\n\
    local attempts = tonumber(redis.call('HGET', row, 'attempts')) or 0\n\
    if attempts >= max then\n\
      redis.call('HSET', row, 'state', 'dead', 'error', 'lease-expired')\n\
      redis.call('ZADD', KEYS[3], now, id)\n\
    else\n\
      redis.call('HSET', row, 'state', 'pending')\n\
      redis.call('ZADD', KEYS[2], 0, id)\n\
    end\n\
    reaped = reaped + 1\n\
  end\n\
end\n\
return reaped\n\
"

  @pause "-- PAUSE  keys: P paused  values: none\n\
-- Sets the pause flag. Replies 1 when newly paused, 0 when already paused.\n\
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 1 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 0 values, got ' .. #ARGV) end\n\
\n\
if redis.call('SET', KEYS[1], '1', 'NX') then return 1 end\n\
return 0\n\
"

  @resume "-- RESUME  keys: P paused  values: none\n\
-- Clears the pause flag. Replies 1 when it was set, 0 otherwise.\n\
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 1 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 0 values, got ' .. #ARGV) end\n\
\n\
return redis.call('DEL', KEYS[1])\n\
"

  @remove "-- REMOVE  keys: P job:<id>, P pending, P delayed, P active, P done, P dead\n\
--         values: id\n\
-- Deletes the row and removes the id from every set. Replies 1 when\n\
-- anything was removed, else 0.\n\
if #KEYS ~= 6 then return redis.error_reply('EMQWIRE EMQ.REMOVE wants 6 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.REMOVE wants 1 values, got ' .. #ARGV) end\n\
local id = ARGV[1]\n\
if KEYS[1] ~= (string.match(KEYS[2], '^(.*:)') or '') .. 'job:' .. id then\n\
  return redis.error_reply('EMQWIRE EMQ.REMOVE key 1 must be job:<id>')\n\
end\n\
\n\
local removed = redis.call('DEL', KEYS[1])\n\
for i = 2, 6 do\n\
  removed = removed + redis.call('ZREM', KEYS[i], id)\n\
end\n\
if removed > 0 then return 1 end\n\
return 0\n\
"

  @stats "-- stats (read)  keys: P pending, P delayed, P active, P done, P dead, P paused\n\
-- Replies [pending, delayed, active, done, dead, paused] as integers;\n\
-- paused is 1 when the flag exists, else 0.\n\
if #KEYS ~= 6 then return redis.error_reply('EMQWIRE stats wants 6 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE stats wants 0 values, got ' .. #ARGV) end\n\
\n\
return {\n\
  redis.call('ZCARD', KEYS[1]),\n\
  redis.call('ZCARD', KEYS[2]),\n\
  redis.call('ZCARD', KEYS[3]),\n\
  redis.call('ZCARD', KEYS[4]),\n\
  redis.call('ZCARD', KEYS[5]),\n\
  redis.call('EXISTS', KEYS[6]),\n\
}\n\
"

  @peek "-- peek (read)  keys: P job:<id>  values: none\n\
-- Replies [state, attempts, payload] with nil for a missing field, or []\n\
-- when there is no row.\n\
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE peek wants 1 keys, got ' .. #KEYS) end\n\
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE peek wants 0 values, got ' .. #ARGV) end\n\
\n\
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n\
return redis.call('HMGET', KEYS[1], 'state', 'attempts', 'payload')\n\
"

  def all, do: [enqueue: @enqueue, claim2: @claim2, extend: @extend, complete: @complete, fail: @fail, retry: @retry, cancel: @cancel, promote: @promote, reap: @reap, pause: @pause, resume: @resume, remove: @remove, stats: @stats, peek: @peek]
end
