-- CANCEL  keys: P pending, P delayed, P job:<id>  values: id
-- A pending or delayed id leaves its set and its row says cancelled.
-- Replies 1, or 0 when the id is neither pending nor delayed. Such an id
-- with no row (an orphan) is dropped from its set and replies 0.
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 3 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 1 values, got ' .. #ARGV) end
local id = ARGV[1]
if KEYS[3] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.CANCEL key 3 must be job:<id>')
end

local pending = redis.call('ZSCORE', KEYS[1], id)
local delayed = redis.call('ZSCORE', KEYS[2], id)
if not pending and not delayed then return 0 end
if pending then redis.call('ZREM', KEYS[1], id) end
if delayed then redis.call('ZREM', KEYS[2], id) end
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end -- an orphan: dropped, no row written
redis.call('HSET', KEYS[3], 'state', 'cancelled')
return 1
