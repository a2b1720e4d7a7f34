-- PAUSE  keys: P paused  values: none
-- Sets the pause flag. Replies 1 when newly paused, 0 when already paused.
if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 1 keys, got ' .. #KEYS) end
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 0 values, got ' .. #ARGV) end

if redis.call('SET', KEYS[1], '1', 'NX') then return 1 end
return 0
