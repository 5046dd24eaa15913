-- cancel: the trainer gave up on the schedule (it crashed and restarted, or superseded the step).
-- Every queued item and every running lease ends in state c (cancelled), in one atomic step: the
-- queues, the steal index and the deadline index go, so nothing is claimed, stolen or reaped again;
-- a cancelled lease is not the item's running lease any more, so its heartbeat answers -1 (the
-- sidecar stops the request) and its late completion STALE, through the existing scripts unchanged.
-- Done and dead items stay as they are, and so does the results stream. The items are found from
-- P:st (one HGETALL), not from the queue names: a thief outside the plan may hold a queue of its own.
-- The first call records the counts in P:meta (cancelled_ms, cancelled_queued, cancelled_running);
-- a repeat changes nothing and answers them again, so a DELETE re-sent after a lost reply reads the
-- same. ARGV: now ('' = server), withdraw_ms ('' = none).
-- An id that holds no schedule is withdrawn for withdraw_ms (P:withdrawn, server time): the request
-- that would publish it may still be in line or planning (its trainer restarted and gave up on
-- it), and publish.lua refuses the id while the key lives, so the cancelled step never reaches the
-- fleet. The caller is still answered NOSCHEDULE: there was nothing to cancel yet.
-- Returns {queued cancelled, running cancelled, cancelled_ms}; error NOSCHEDULE.
local cfg = settings()
if not cfg then
  if (ARGV[2] or '') ~= '' then
    redis.call('SET', k('withdrawn'), now_ms(''), 'PX', ARGV[2])
  end
  return redis.error_reply('NOSCHEDULE')
end
local before = redis.call('HMGET', META, 'cancelled_ms', 'cancelled_queued', 'cancelled_running')
if before[1] then return {tonumber(before[2]), tonumber(before[3]), tonumber(before[1])} end
local now = now_ms(ARGV[1])
local flat = redis.call('HGETALL', k('st'))
local queued, running, queues = 0, 0, {}
for i = 1, #flat, 2 do
  local s = string.sub(flat[i + 1], 1, 1)
  if s == 'q' or s == 'r' then
    local key, r = flat[i], parse(flat[i + 1])
    cache[key] = r
    if s == 'q' then
      queued = queued + 1
      queues[r.w] = true
    else
      running = running + 1
    end
    count(s, r.w, -1)
    count('c', r.w, 1)
    r.s = 'c'
    dirty[key] = true
  end
end
flat = nil
for w, _ in pairs(queues) do redis.call('DEL', k('q:' .. w), unpack(index_keys(cfg, w))) end
redis.call('DEL', k('work'), k('deadlines'))
flush(cfg)
redis.call('HSET', META, 'cancelled_ms', now, 'cancelled_queued', queued, 'cancelled_running', running)
return {queued, running, now}
