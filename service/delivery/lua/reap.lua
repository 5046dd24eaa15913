-- reap: expire every lease whose deadline passed (requeue at the head of the holder's queue, or
-- dead-letter after max_attempts). Atomic, so replicas reaping at once never double-requeue.
-- ARGV: now ('' = server), limit (most leases handled per call).
-- Returns {requeued, dead_lettered}; error NOSCHEDULE once the schedule expired.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now = now_ms(ARGV[1])
local requeued, dead = 0, 0
for _, key in ipairs(redis.call('ZRANGEBYSCORE', k('deadlines'), '-inf', '(' .. now, 'LIMIT', 0,
    tonumber(ARGV[2]))) do
  if expire(key, now, cfg) == 'dead' then dead = dead + 1 else requeued = requeued + 1 end
end
flush(cfg)
return {requeued, dead}
