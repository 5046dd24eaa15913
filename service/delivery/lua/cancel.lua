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
-- An id that holds no schedule but a POST /schedule in flight (P:planning, an entry per request:
-- in line or planning, on any replica; its trainer restarted and gave the step up) is withdrawn
-- for withdraw_ms, or as long as P:planning had left if longer (P:withdrawn, server time, in place
-- of P:planning): publish.lua refuses it while the key lives, so the abandoned step never reaches the
-- fleet. A repeat answers the same. An id with neither is NOSCHEDULE and nothing is written: a
-- mistyped id changes no state.
-- Returns {queued cancelled, running cancelled, cancelled_ms, withdrawn (1 or 0)}; error NOSCHEDULE.
local cfg = settings()
if not cfg then
  local since = redis.call('GET', k('withdrawn'))
  if since then return {0, 0, tonumber(since), 1} end
  if (ARGV[2] or '') == '' or redis.call('EXISTS', k('planning')) == 0 then
    return redis.error_reply('NOSCHEDULE')
  end
  local now = now_ms('')
  -- as long as the retention, or as the mark it replaces if longer: a request may wait in line and
  -- plan past a short retention, and a lapsed withdrawal let it publish the abandoned step
  local ttl = math.max(tonumber(ARGV[2]), redis.call('PTTL', k('planning')))
  redis.call('SET', k('withdrawn'), now, 'PX', ttl)
  redis.call('DEL', k('planning'))
  return {0, 0, now, 1}
end
local before = redis.call('HMGET', META, 'cancelled_ms', 'cancelled_queued', 'cancelled_running')
if before[1] then return {tonumber(before[2]), tonumber(before[3]), tonumber(before[1]), 0} end
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
return {queued, running, now, 0}
