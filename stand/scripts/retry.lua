-- RETRY  keys: P dead, P job:<id>, P pending  values: id
-- A dead id goes back to pending with attempts 0 and no error.
-- Replies 1, or 0 when the id is not dead. A dead id with no row (an
-- orphan) is dropped from dead and replies 0.
if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 3 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 1 values, got ' .. #ARGV) end
local id = ARGV[1]
if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.RETRY key 2 must be job:<id>')
end

if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
redis.call('ZREM', KEYS[1], id)
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written
redis.call('HSET', KEYS[2], 'state', 'pending', 'attempts', 0)
redis.call('HDEL', KEYS[2], 'error')
redis.call('ZADD', KEYS[3], 0, id)
return 1
