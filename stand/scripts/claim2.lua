-- CLAIM  keys: P pending, P active  values: lease_ms
-- Pops the lowest pending id, leases it until now+lease_ms and counts the
-- attempt. An orphan id (no row) is dropped and the next one tried.
-- Replies [id, payload, attempts], or [] when nothing is pending. The pause
-- flag is the host's business: it reads it before sending this script.
if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.CLAIM wants 2 keys, got ' .. #KEYS) end
if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.CLAIM wants 1 values, got ' .. #ARGV) end
local function int(j, min)
  local digits = string.match(ARGV[j], '^0*([0-9]*)$')
  if not digits or ARGV[j] == '' or #digits > 16 then return nil end
  local n = tonumber(digits) or 0
  if n < min or n >= 9007199254740992 then return nil end
  return n
end
local lease = int(1, 0)
if not lease then return redis.error_reply('EMQWIRE EMQ.CLAIM value 1 must be an integer') end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = string.match(KEYS[1], '^(.*:)') or ''
while true do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then return {} end
  local id = popped[1]
  local row = prefix .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', KEYS[2], now + lease, id)
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active')
    return {id, redis.call('HGET', row, 'payload'), attempts}
  end
end
