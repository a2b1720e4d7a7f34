-- RESUME  keys: P paused  values: none
-- Clears the pause flag. Replies 1 when it was set, 0 otherwise.
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 1 keys, got ' .. #KEYS) end
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 0 values, got ' .. #ARGV) end

return redis.call('DEL', KEYS[1])
