-- KEYS: pending set, active set; ARGV: lease_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local id = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
if not id then return {} end
redis.call('ZREM', KEYS[1], id)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
return {id}
