-- EXTEND  keys: P active, P job:<id>  values: id, lease_ms
-- An active id gets the deadline now+lease_ms. Replies the new deadline,
-- or 0 when the id is not active. An active id with no row (an orphan) is
-- dropped from active and replies 0.
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 keys, got ' .. #KEYS) end
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 values, got ' .. #ARGV) end
local function int(j, min)
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end
  local n = tonumber(digits) or 0
  if n < min or n >= 9007199254740992 then return nil end
  return n
end
local id = ARGV[1]
local lease = int(2, 0)
if not lease then return redis.error_reply('EMQWIRE EMQ.EXTEND value 2 must be an integer') end
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.EXTEND key 2 must be job:<id>')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then -- an orphan: dropped, no row written
  redis.call('ZREM', KEYS[1], id)
  return 0
end
local deadline = now + lease
redis.call('ZADD', KEYS[1], 'XX', deadline, id)
return deadline
