-- steal: a worker whose own queue is empty leases items from the TAIL of the queue with the most
-- predicted work left (so the longest, planned-first items stay with their owner), at most half of
-- that queue (at least one item) and at most max. The items go straight from queue to lease inside
-- this one script, so no item is ever both queued and leased, and two thieves never get the same one.
-- The KV steal gate: with a budget (the thief's free KV tokens at predicted final lengths), tail items
-- are taken only while their cumulative reservation fits it; the first that does not ends the steal
-- and stays queued, as in the simulator (scheduler/sim_engine.py, reservation_fits).
-- ARGV: thief, max, now ('' = server), budget ('' = unbounded: the thief does not know its KV cache).
-- Returns {victim, then 5-tuples as claim}; {} when there is nothing to steal or nothing fits.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local thief, want, now, budget = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3]), tonumber(ARGV[4])
if redis.call('LLEN', k('q:' .. thief)) > 0 then return {} end
local victim = nil
for _, v in ipairs(redis.call('ZREVRANGE', k('work'), 0, 1)) do
  if v ~= thief then victim = v break end
end
if not victim then return {} end
local queue = k('q:' .. victim)
local len = redis.call('LLEN', queue)
if len == 0 then
  redis.call('ZREM', k('work'), victim)
  return {}
end
local take = math.min(want, math.max(1, math.floor(len / 2)))
if budget then
  local tail, fit, used = redis.call('LRANGE', queue, -take, -1), 0, 0
  for i = #tail, 1, -1 do
    used = used + (tonumber(get(tail[i]).res) or 0)
    if used > budget then break end
    fit = fit + 1
  end
  if fit == 0 then return {} end
  take = fit
end
local keys = redis.call('RPOP', queue, take)
dequeued(victim, keys)
local out = {victim}
lease_all(keys, thief, now, cfg, out)
flush(cfg)
return out
