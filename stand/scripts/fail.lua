-- FAIL  keys: P active, P job:<id>, P delayed, P dead
--       values: id, error, max_attempts, backoff_ms
-- An active id leaves active and its row records the error. Below
-- max_attempts it is delayed until now+backoff_ms (replies that run-at),
-- otherwise it is dead (replies 0). Replies -1 when the id is not active;
-- an active id with no row (an orphan) is dropped from active and replies -1.
if #KEYS ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 keys, got ' .. #KEYS) end
if #ARGV ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 values, got ' .. #ARGV) end
local function int(j, min)
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end
  local n = tonumber(digits) or 0
  if n < min or n >= 9007199254740992 then return nil end
  return n
end
local id, err = ARGV[1], ARGV[2]
local max = int(3, 0)
if not max then return redis.error_reply('EMQWIRE EMQ.FAIL value 3 must be an integer') end
local backoff = int(4, 0)
if not backoff then return redis.error_reply('EMQWIRE EMQ.FAIL value 4 must be an integer') end
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.FAIL key 2 must be job:<id>')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], id) then return -1 end
redis.call('ZREM', KEYS[1], id)
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end -- an orphan: dropped, no row written
local attempts = tonumber(redis.call('HGET', KEYS[2], 'attempts')) or 0
if attempts < max then
  local run_at = now + backoff
  redis.call('HSET', KEYS[2], 'state', 'delayed', 'error', err)
  redis.call('ZADD', KEYS[3], run_at, id)
  return run_at
end
redis.call('HSET', KEYS[2], 'state', 'dead', 'error', err)
redis.call('ZADD', KEYS[4], now, id)
return 0
