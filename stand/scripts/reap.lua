-- REAP  keys: P active, P pending, P dead  values: limit, max_attempts
-- Up to limit active ids whose lease has expired (deadline < now), lowest
-- first, leave active. One that has used max_attempts dies with the error
-- lease-expired; the others go back to pending. An orphan id is dropped,
-- uses one place of the limit and is not counted.
-- Replies the number of jobs reaped.
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.REAP wants 3 keys, got ' .. #KEYS) end
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.REAP wants 2 values, got ' .. #ARGV) end
local function int(j, min)
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end
  local n = tonumber(digits) or 0
  if n < min or n >= 9007199254740992 then return nil end
  return n
end
local limit = int(1, 1)
if not limit then return redis.error_reply('EMQWIRE EMQ.REAP value 1 must be an integer') end
local max = int(2, 0)
if not max then return redis.error_reply('EMQWIRE EMQ.REAP value 2 must be an integer') end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = string.match(KEYS[1], '^(.*:)') or ''
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now),
  'LIMIT', 0, string.format('%d', limit))
local reaped = 0
for _, id in ipairs(ids) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  if redis.call('EXISTS', row) == 1 then
    local attempts = tonumber(redis.call('HGET', row, 'attempts')) or 0
    if attempts >= max then
      redis.call('HSET', row, 'state', 'dead', 'error', 'lease-expired')
      redis.call('ZADD', KEYS[3], now, id)
    else
      redis.call('HSET', row, 'state', 'pending')
      redis.call('ZADD', KEYS[2], 0, id)
    end
    reaped = reaped + 1
  end
end
return reaped
