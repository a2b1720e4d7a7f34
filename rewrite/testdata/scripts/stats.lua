-- KEYS: pending, delayed, active, done, dead, paused
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('EXISTS', KEYS[6])}
