-- reset: hand back the leases worker w still holds from an earlier process of its own. A push sidecar
-- restarted after a SIGKILL, an OOM kill or its node's restart runs nothing its predecessor ran (their
-- HTTP requests died with it, and an engine aborts a request whose connection closed), yet those
-- leases would stay running until they lapse, a whole lease TTL, and then until a reaper passes.
-- A lease still current is released as a graceful shutdown releases it (head of the holder's queue,
-- attempt refunded) the first `refunds` times its item is handed back so (common.lua hand_back,
-- P:handback); after that the hand-back spends the attempt, and dead-letters the item on its last,
-- naming why: an item whose run kills its sidecar (an OOM, a crash on that input) was refunded at
-- every restart and came back for ever. One already lapsed is expired as the reaper would (attempt
-- spent, or dead-lettered).
-- ARGV: now ('' = server), worker, age (ms since the calling process started), refunds (hand-backs
-- of one item that refund its attempt, keys.RESET_REFUNDS), call id ('' = none). A re-sent call (its
-- reply lost: Redis cut after running it, redis-py re-sending) finds the leases gone and would answer
-- zeros, so the caller never counted what the first run handed back; the same id again answers the
-- first run's counts and hands back nothing more (P:calls 'reset <w>': '<id>\n<counts>', as claims
-- keep theirs in common.lua remember_call). A lease whose deadline is at or past
-- now - age + ttl was taken or extended since that start: a live process holds it (a second sidecar
-- with the same worker id, or the caller itself), and it is left alone, unless only an outage's grace
-- extended it (below).
-- Returns {released, requeued_lapsed, dead_lettered, charged, settled (1 when every item is done, dead
-- or cancelled)}; error NOSCHEDULE once the schedule expired.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now, w, age, refunds, call = now_ms(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] or ''
local field = 'reset ' .. w
if call ~= '' then
  local last = redis.call('HGET', k('calls'), field)
  local id, counts = string.match(last or '', '^([^\n]*)\n(.*)$')
  if id == call then
    local out = {}
    for n in string.gmatch(counts, '%d+') do out[#out + 1] = tonumber(n) end
    out[#out + 1] = settled_flag(cfg)
    return out
  end
end
pulse(cfg, ARGV[1])  -- first: an outage's grace before any lease is judged (common.lua)
local cutoff = now - age + cfg.ttl
local mine = {}
for _, key in ipairs(redis.call('ZRANGEBYSCORE', k('deadlines'), '-inf', '(' .. int(cutoff))) do
  local r = get(key)
  if r and r.s == 'r' and r.w == w then mine[#mine + 1] = key end
end
-- A lease an outage graced (common.lua pulse: a deadline of a TTL after the silence, P:graced holding
-- its token until its holder heartbeats it) looks extended since the caller started when the caller
-- started during the outage (its sidecar killed and restarted while Redis was away), yet no holder
-- spoke for it: the grace is no sign of life, a heartbeat is. So one still marked is handed back too;
-- left alone, it lapsed a TTL after the return with its attempt spent.
if cfg.graced then
  local marks = redis.call('HGETALL', k('graced'))
  for i = 1, #marks, 2 do
    local r = get(marks[i])
    if r and r.s == 'r' and r.w == w and r.tok == marks[i + 1] and r.dl >= cutoff then
      mine[#mine + 1] = marks[i]
    end
  end
end
-- Each requeue is an LPUSH at the head: the latest claim first, so the queue gets them back in the
-- order they were claimed (tokens rise with every claim), as reap.lua does.
table.sort(mine, function(a, b) return tonumber(get(a).tok) > tonumber(get(b).tok) end)

local released, lapsed, dead, charged = 0, 0, 0, 0
for _, key in ipairs(mine) do
  if get(key).dl < now then
    if expire(key, now, cfg) == 'dead' then dead = dead + 1 else lapsed = lapsed + 1 end
  else
    local how = hand_back(key, now, refunds, 'its sidecar', cfg)
    if how == 'released' then released = released + 1
    elseif how == 'dead' then dead = dead + 1
    else charged = charged + 1 end
  end
end
flush(cfg)
if call ~= '' and released + lapsed + dead + charged > 0 then  -- a run that ended nothing is safe to run again
  redis.call('HSET', k('calls'), field, call .. '\n' .. table.concat({released, lapsed, dead, charged}, ' '))
  keep(k('calls'), cfg.exp)
end
return {released, lapsed, dead, charged, settled_flag(cfg)}
