-- PROMOTE  keys: P delayed, P pending  values: limit
-- Up to limit delayed ids whose run-at is due (score <= now), lowest first,
-- move to pending at score 0 and their rows say pending. An orphan id is
-- dropped, uses one place of the limit and is not counted.
-- Replies the number of jobs moved.
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 2 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 1 values, got ' .. #ARGV) end
local function int(j, min)
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end
  local n = tonumber(digits) or 0
  if n < min or n >= 9007199254740992 then return nil end
  return n
end
local limit = int(1, 1)
if not limit then return redis.error_reply('EMQWIRE EMQ.PROMOTE value 1 must be an integer') end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = string.match(KEYS[1], '^(.*:)') or ''
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),
  'LIMIT', 0, string.format('%d', limit))
local moved = 0
for _, id in ipairs(ids) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  if redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
    moved = moved + 1
  end
end
return moved
