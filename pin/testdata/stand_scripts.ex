# The stand's script bodies (stand/scripts/*.lua) as module attributes, for
# the test that pins them from Elixir. Rewrite with:
#   go test ./pin -run TestPinStandElixir -update
defmodule Stand.Scripts do
  @enqueue """
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
      """

  @claim2 """
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
      """

  @extend """
      -- EXTEND  keys: P active, P job:<id>  values: id, lease_ms
      -- An active id gets the deadline now+lease_ms. Replies the new deadline,
      -- or 0 when the id is not active. An active id with no row (an orphan) is
      -- dropped from active and replies 0.
      if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 keys, got ' .. #KEYS) end
      if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.EXTEND wants 2 values, got ' .. #ARGV) end
      local function int(j, min)
        local digits = string.match(ARGV[j], '^0*([0-9]*)$')
        if not digits or ARGV[j] == '' or #digits > 16 then return nil end
        local n = tonumber(digits) or 0
        if n < min or n >= 9007199254740992 then return nil end
        return n
      end
      local id = ARGV[1]
      local lease = int(2, 0)
      if not lease then return redis.error_reply('EMQWIRE EMQ.EXTEND value 2 must be an integer') end
      if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
        return redis.error_reply('EMQWIRE EMQ.EXTEND key 2 must be job:<id>')
      end

      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
      if redis.call('EXISTS', KEYS[2]) == 0 then -- an orphan: dropped, no row written
        redis.call('ZREM', KEYS[1], id)
        return 0
      end
      local deadline = now + lease
      redis.call('ZADD', KEYS[1], 'XX', deadline, id)
      return deadline
      """

  @complete """
      -- COMPLETE  keys: P active, P job:<id>, P done  values: id
      -- An active id leaves active, its row says done, and it enters done at now.
      -- Replies 1, or 0 when the id is not active. An active id with no row (an
      -- orphan) is dropped from active and replies 0.
      if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 3 keys, got ' .. #KEYS) end
      if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.COMPLETE wants 1 values, got ' .. #ARGV) end
      local id = ARGV[1]
      if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
        return redis.error_reply('EMQWIRE EMQ.COMPLETE key 2 must be job:<id>')
      end

      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
      redis.call('ZREM', KEYS[1], id)
      if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written
      redis.call('HSET', KEYS[2], 'state', 'done')
      redis.call('ZADD', KEYS[3], now, id)
      return 1
      """

  @fail """
      -- FAIL  keys: P active, P job:<id>, P delayed, P dead
      --       values: id, error, max_attempts, backoff_ms
      -- An active id leaves active and its row records the error. Below
      -- max_attempts it is delayed until now+backoff_ms (replies that run-at),
      -- otherwise it is dead (replies 0). Replies -1 when the id is not active;
      -- an active id with no row (an orphan) is dropped from active and replies -1.
      if #KEYS ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 keys, got ' .. #KEYS) end
      if #ARGV ~= 4 then return redis.error_reply('EMQWIRE EMQ.FAIL wants 4 values, got ' .. #ARGV) end
      local function int(j, min)
        local digits = string.match(ARGV[j], '^0*([0-9]*)$')
        if not digits or ARGV[j] == '' or #digits > 16 then return nil end
        local n = tonumber(digits) or 0
        if n < min or n >= 9007199254740992 then return nil end
        return n
      end
      local id, err = ARGV[1], ARGV[2]
      local max = int(3, 0)
      if not max then return redis.error_reply('EMQWIRE EMQ.FAIL value 3 must be an integer') end
      local backoff = int(4, 0)
      if not backoff then return redis.error_reply('EMQWIRE EMQ.FAIL value 4 must be an integer') end
      if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
        return redis.error_reply('EMQWIRE EMQ.FAIL key 2 must be job:<id>')
      end

      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      if not redis.call('ZSCORE', KEYS[1], id) then return -1 end
      redis.call('ZREM', KEYS[1], id)
      if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end -- an orphan: dropped, no row written
      local attempts = tonumber(redis.call('HGET', KEYS[2], 'attempts')) or 0
      if attempts < max then
        local run_at = now + backoff
        redis.call('HSET', KEYS[2], 'state', 'delayed', 'error', err)
        redis.call('ZADD', KEYS[3], run_at, id)
        return run_at
      end
      redis.call('HSET', KEYS[2], 'state', 'dead', 'error', err)
      redis.call('ZADD', KEYS[4], now, id)
      return 0
      """

  @retry """
      -- RETRY  keys: P dead, P job:<id>, P pending  values: id
      -- A dead id goes back to pending with attempts 0 and no error.
      -- Replies 1, or 0 when the id is not dead. A dead id with no row (an
      -- orphan) is dropped from dead and replies 0.
      if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 3 keys, got ' .. #KEYS) end
      if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.RETRY wants 1 values, got ' .. #ARGV) end
      local id = ARGV[1]
      if KEYS[2] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
        return redis.error_reply('EMQWIRE EMQ.RETRY key 2 must be job:<id>')
      end

      if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
      redis.call('ZREM', KEYS[1], id)
      if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end -- an orphan: dropped, no row written
      redis.call('HSET', KEYS[2], 'state', 'pending', 'attempts', 0)
      redis.call('HDEL', KEYS[2], 'error')
      redis.call('ZADD', KEYS[3], 0, id)
      return 1
      """

  @cancel """
      -- CANCEL  keys: P pending, P delayed, P job:<id>  values: id
      -- A pending or delayed id leaves its set and its row says cancelled.
      -- Replies 1, or 0 when the id is neither pending nor delayed. Such an id
      -- with no row (an orphan) is dropped from its set and replies 0.
      if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 3 keys, got ' .. #KEYS) end
      if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.CANCEL wants 1 values, got ' .. #ARGV) end
      local id = ARGV[1]
      if KEYS[3] ~= (string.match(KEYS[1], '^(.*:)') or '') .. 'job:' .. id then
        return redis.error_reply('EMQWIRE EMQ.CANCEL key 3 must be job:<id>')
      end

      local pending = redis.call('ZSCORE', KEYS[1], id)
      local delayed = redis.call('ZSCORE', KEYS[2], id)
      if not pending and not delayed then return 0 end
      if pending then redis.call('ZREM', KEYS[1], id) end
      if delayed then redis.call('ZREM', KEYS[2], id) end
      if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end -- an orphan: dropped, no row written
      redis.call('HSET', KEYS[3], 'state', 'cancelled')
      return 1
      """

  @promote """
      -- PROMOTE  keys: P delayed, P pending  values: limit
      -- Up to limit delayed ids whose run-at is due (score <= now), lowest first,
      -- move to pending at score 0 and their rows say pending. An orphan id is
      -- dropped, uses one place of the limit and is not counted.
      -- Replies the number of jobs moved.
      if #KEYS ~= 2 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 2 keys, got ' .. #KEYS) end
      if #ARGV ~= 1 then return redis.error_reply('EMQWIRE EMQ.PROMOTE wants 1 values, got ' .. #ARGV) end
      local function int(j, min)
        local digits = string.match(ARGV[j], '^0*([0-9]*)$')
        if not digits or ARGV[j] == '' or #digits > 16 then return nil end
        local n = tonumber(digits) or 0
        if n < min or n >= 9007199254740992 then return nil end
        return n
      end
      local limit = int(1, 1)
      if not limit then return redis.error_reply('EMQWIRE EMQ.PROMOTE value 1 must be an integer') end

      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      local prefix = string.match(KEYS[1], '^(.*:)') or ''
      local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),
        'LIMIT', 0, string.format('%d', limit))
      local moved = 0
      for _, id in ipairs(ids) do
        local row = prefix .. 'job:' .. id
        redis.call('ZREM', KEYS[1], id)
        if redis.call('EXISTS', row) == 1 then
          redis.call('ZADD', KEYS[2], 0, id)
          redis.call('HSET', row, 'state', 'pending')
          moved = moved + 1
        end
      end
      return moved
      """

  @reap """
      -- REAP  keys: P active, P pending, P dead  values: limit, max_attempts
      -- Up to limit active ids whose lease has expired (deadline < now), lowest
      -- first, leave active. One that has used max_attempts dies with the error
      -- lease-expired; the others go back to pending. An orphan id is dropped,
      -- uses one place of the limit and is not counted.
      -- Replies the number of jobs reaped.
      if #KEYS ~= 3 then return redis.error_reply('EMQWIRE EMQ.REAP wants 3 keys, got ' .. #KEYS) end
      if #ARGV ~= 2 then return redis.error_reply('EMQWIRE EMQ.REAP wants 2 values, got ' .. #ARGV) end
      local function int(j, min)
        local digits = string.match(ARGV[j], '^0*([0-9]*)$')
        if not digits or ARGV[j] == '' or #digits > 16 then return nil end
        local n = tonumber(digits) or 0
        if n < min or n >= 9007199254740992 then return nil end
        return n
      end
      local limit = int(1, 1)
      if not limit then return redis.error_reply('EMQWIRE EMQ.REAP value 1 must be an integer') end
      local max = int(2, 0)
      if not max then return redis.error_reply('EMQWIRE EMQ.REAP value 2 must be an integer') end

      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      local prefix = string.match(KEYS[1], '^(.*:)') or ''
      local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now),
        'LIMIT', 0, string.format('%d', limit))
      local reaped = 0
      for _, id in ipairs(ids) do
        local row = prefix .. 'job:' .. id
        redis.call('ZREM', KEYS[1], id)
        if redis.call('EXISTS', row) == 1 then
          local attempts = tonumber(redis.call('HGET', row, 'attempts')) or 0
          if attempts >= max then
            redis.call('HSET', row, 'state', 'dead', 'error', 'lease-expired')
            redis.call('ZADD', KEYS[3], now, id)
          else
            redis.call('HSET', row, 'state', 'pending')
            redis.call('ZADD', KEYS[2], 0, id)
          end
          reaped = reaped + 1
        end
      end
      return reaped
      """

  @pause """
      -- PAUSE  keys: P paused  values: none
      -- Sets the pause flag. Replies 1 when newly paused, 0 when already paused.
      if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 1 keys, got ' .. #KEYS) end
      if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.PAUSE wants 0 values, got ' .. #ARGV) end

      if redis.call('SET', KEYS[1], '1', 'NX') then return 1 end
      return 0
      """

  @resume """
      -- RESUME  keys: P paused  values: none
      -- Clears the pause flag. Replies 1 when it was set, 0 otherwise.
      if #KEYS ~= 1 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 1 keys, got ' .. #KEYS) end
      if #ARGV ~= 0 then return redis.error_reply('EMQWIRE EMQ.RESUME wants 0 values, got ' .. #ARGV) end

      return redis.call('DEL', KEYS[1])
      """

  @remove """
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
      """

  @stats """
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
      """

  @peek """
      -- peek (read)  keys: P job:<id>  values: none
      -- Replies [state, attempts, payload] with nil for a missing field, or []
      -- when there is no row.
      if #KEYS ~= 1 then return redis.error_reply('EMQWIRE peek wants 1 keys, got ' .. #KEYS) end
      if #ARGV ~= 0 then return redis.error_reply('EMQWIRE peek wants 0 values, got ' .. #ARGV) end

      if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
      return redis.call('HMGET', KEYS[1], 'state', 'attempts', 'payload')
      """

  def all, do: [enqueue: @enqueue, claim2: @claim2, extend: @extend, complete: @complete, fail: @fail, retry: @retry, cancel: @cancel, promote: @promote, reap: @reap, pause: @pause, resume: @resume, remove: @remove, stats: @stats, peek: @peek]
end
