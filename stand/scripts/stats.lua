-- stats (read)  keys: P pending, P delayed, P active, P done, P dead, P paused
-- Replies [pending, delayed, active, done, dead, paused] as integers;
-- paused is 1 when the flag exists, else 0.
if #KEYS ~= 6 then return redis.error_reply('EMQWIRE stats wants 6 keys, got ' .. #KEYS) end
if #ARGV ~= 0 then return redis.error_reply('EMQWIRE stats wants 0 values, got ' .. #ARGV) end

return {
  redis.call('ZCARD', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  redis.call('EXISTS', KEYS[6]),
}
