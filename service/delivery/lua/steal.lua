-- steal: a worker whose own queue is empty leases items from the TAIL of the queue with the most
-- predicted work left (so the longest, planned-first items stay with their owner), at most half of
-- that queue (at least one item) and at most max. The items go straight from queue to lease inside
-- this one script, so no item is ever both queued and leased, and two thieves never get the same one.
-- ARGV: thief, max, now ('' = server).
-- Returns {victim, then 5-tuples as claim}; {} when there is nothing to steal.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local thief, want, now = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3])
if redis.call('LLEN', k('q:' .. thief)) > 0 then return {} end
local victim = nil
for _, v in ipairs(redis.call('ZREVRANGE', k('work'), 0, 1)) do
  if v ~= thief then victim = v break end
end
if not victim then return {} end
local len = redis.call('LLEN', k('q:' .. victim))
local keys = redis.call('RPOP', k('q:' .. victim), math.min(want, math.max(1, math.floor(len / 2))))
if not keys then
  redis.call('ZREM', k('work'), victim)
  return {}
end
dequeued(victim, keys)
local out = {victim}
lease_all(keys, thief, now, cfg, out)
flush(cfg)
return out
