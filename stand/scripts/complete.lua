-- COMPLETE  keys: P active, P job:<id>, P done  values: id
-- An active id leaves active, its row says done, and it enters done at now.
-- Replies 1, or 0 when the id is not active. An active id with no row (an
-- orphan) is dropped from active and replies 0.
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 3 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 1 values, got ' .. #ARGV) end
local id = ARGV[1]
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.COMPLETE key 2 must be job:<id>')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
redis.call('ZREM', KEYS[1], id)
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written
redis.call('HSET', KEYS[2], 'state', 'done')
redis.call('ZADD', KEYS[3], now, id)
return 1
