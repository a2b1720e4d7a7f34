-- REMOVE  keys: P job:<id>, P pending, P delayed, P active, P done, P dead
--         values: id
-- Deletes the row and removes the id from every set. Replies 1 when
-- anything was removed, else 0.
if #KEYS ~= 6 then return redis.error_reply('EMQWIRE EMQ.REMOVE wants 6 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.REMOVE wants 1 values, got ' .. #ARGV) end
local id = ARGV[1]
if KEYS[1] ~= (string.match(KEYS[2], '^(.*:)') or '') .. 'job:' .. id then
  return redis.error_reply('EMQWIRE EMQ.REMOVE key 1 must be job:<id>')
end

local removed = redis.call('DEL', KEYS[1])
for i = 2, 6 do
  removed = removed + redis.call('ZREM', KEYS[i], id)
end
if removed > 0 then return 1 end
return 0
