-- reap: expire every lease whose deadline passed (requeue at the head of the holder's queue, or
-- dead-letter after max_attempts). Atomic, so replicas reaping at once never double-requeue.
-- ARGV: now ('' = server), limit (most leases handled per call).
-- Returns {requeued, dead_lettered, quiet_until, holder..., settled (1 when every item is done, dead or
-- cancelled)}: the distinct workers whose leases lapsed, in the order first met (at most one per lease
-- handled); error NOSCHEDULE once the schedule expired. quiet_until (ms, this clock): none of the
-- schedule's leases has lapsed by then (a lease lapses once now is past its deadline), for the reapers'
-- index <prefix>:lapse (keys.py): the earliest lease deadline left, or now + the lease ttl if that is
-- sooner, since every deadline written later is its writer's now + ttl (now + a third of the ttl
-- while any lease runs); now itself when the limit cut the pass short (more may have lapsed).
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now = now_ms(ARGV[1])
pulse(cfg, ARGV[1])  -- first: an outage's grace before any lease is judged (common.lua)
local requeued, dead = 0, 0
local expired = redis.call('ZRANGEBYSCORE', k('deadlines'), '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[2]))
-- Each requeue is an LPUSH at the head, so requeue the latest claim first: a holder's queue then
-- gets its leases back in the order it claimed them (tokens rise with every claim), the plan's order.
table.sort(expired, function(a, b) return tonumber(get(a).tok) > tonumber(get(b).tok) end)
local out, seen = {requeued, dead, 0}, {}
for _, key in ipairs(expired) do
  local holder = get(key).w
  if not seen[holder] then seen[holder] = true; out[#out + 1] = holder end
  if expire(key, now, cfg) == 'dead' then dead = dead + 1 else requeued = requeued + 1 end
end
flush(cfg)
local quiet = now + cfg.ttl
if #expired >= tonumber(ARGV[2]) then
  quiet = now
else
  local first = redis.call('ZRANGE', k('deadlines'), 0, 0, 'WITHSCORES')
  -- while leases run, a visit at least every third of the TTL: the reapers' visits are what tells
  -- pulse (common.lua) an outage from the silence of holders that all died
  if first[2] then quiet = math.min(quiet, tonumber(first[2]), now + math.floor(cfg.ttl / 3)) end
end
out[1], out[2], out[3] = requeued, dead, int(quiet)
out[#out + 1] = settled_flag(cfg)
return out
