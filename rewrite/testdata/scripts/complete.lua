-- KEYS: job row, active set, done set; ARGV: id, epoch
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return redis.call('HSET', KEYS[1], 'state', 'done')
