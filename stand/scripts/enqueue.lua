-- ENQUEUE  keys: P job:<id>, P pending  values: id, payload
-- A new job: row {state pending, attempts 0, payload}, id in pending at
-- score 0. Replies 1 when new, 0 when the row already existed.
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.ENQUEUE wants 2 keys, got ' .. #KEYS) end
if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.ENQUEUE wants 2 values, got ' .. #ARGV) end
local id, payload = ARGV[1], ARGV[2]
if KEYS[1] ~= (string.match(KEYS[2], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.ENQUEUE key 1 must be job:<id>')
end

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', 0, 'payload', payload)
redis.call('ZADD', KEYS[2], 0, id)
return 1
