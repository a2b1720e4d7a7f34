-- peek (read)  keys: P job:<id>  values: none
-- Replies [state, attempts, payload] with nil for a missing field, or []
-- when there is no row.
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE peek wants 1 keys, got ' .. #KEYS) end
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE peek wants 0 values, got ' .. #ARGV) end

if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
return redis.call('HMGET', KEYS[1], 'state', 'attempts', 'payload')
