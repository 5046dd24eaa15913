-- release: hand leases back. mode 'release' (graceful shutdown): requeue at the head of the holder's
-- queue in the original order and refund the attempt. mode 'died' (what ran them died: a pull
-- worker's /reset, an engine that crashed): the same, but each item's attempt is refunded only its
-- first time back so, then spent, dead-lettering it on its last (common.lua hand_back; reason =
-- '<refunds> <who died>', who for the dead letter). mode 'fail' (the engine failed the item): the
-- attempt counts; dead-letter once max_attempts are spent, else the next attempt goes to the head
-- of ANOTHER worker's queue when one may take it (retry_target), else back to the holder's head.
-- ARGV: mode, now ('' = server), reason, holder ('' = any: the token alone), then pairs (key,
-- token). A lease held by another worker is stale (as in complete.lua): nothing changes. A failure
-- taken is recorded by its token and holder (P:failed), so a repeat of it (a report whose answer was
-- lost, sent again) is answered duplicate, as complete.lua answers a repeated completion: a landed
-- failure and a lapse leave the same record in P:st, and only this tells the sender which it was.
-- A hand-back taken (modes 'release' and 'died') is recorded so too (P:released), and a repeat of it
-- (a sidecar's release at a drain whose answer a failover lost, sent again to the new master) is
-- answered duplicate where it requeued, dead-lettered again where it dead-lettered (what its sender
-- counts differs), where it was stale: counted 'lost' beside a lease that went back.
-- Returns one code per lease: 1 requeued, 3 dead-lettered (also a repeat of a hand-back that
-- dead-lettered), 2 duplicate (this token's failure, or hand-back that requeued, was taken already;
-- nothing changed), 0 stale (not held: nothing changed); then the settled flag (1 when every item is
-- done, dead or cancelled).
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local mode, now, reason, holder = ARGV[1], now_ms(ARGV[2]), ARGV[3], ARGV[4]
pulse(cfg, ARGV[2])  -- first: an outage's grace before any lease is judged (common.lua)
local out = {}

-- The workers whose attempt at key was reported failed, as a set, with the holder w added to them
-- (P:tried, written only here: a failure is rare, so the record costs nothing on the hot path).
local function tried_with(key, w)
  local before = redis.call('HGET', k('tried'), key) or ''
  local tried = {}
  for name in string.gmatch(before, '[^ ]+') do tried[name] = true end
  if not tried[w] then
    redis.call('HSET', k('tried'), key, before == '' and w or before .. ' ' .. w)
    keep(k('tried'), cfg.exp)
    tried[w] = true
  end
  return tried
end

-- P:failed: item key -> '<token>:<holder>' of each lease whose failure was taken, space-separated
-- (at most one per attempt, each failure spends one), written only here and expiring with the schedule.
local function took_failure(key, token, w)
  local before = redis.call('HGET', k('failed'), key)
  local entry = token .. ':' .. w
  redis.call('HSET', k('failed'), key, before and (before .. ' ' .. entry) or entry)
  keep(k('failed'), cfg.exp)
end

-- Whether the failure of key's lease token, held by holder ('' = any), was taken already.
local function failure_taken(key, token, who)
  for entry in string.gmatch(redis.call('HGET', k('failed'), key) or '', '[^ ]+') do
    local tok, w = string.match(entry, '^(%d+):(.*)$')
    if tok == token and (who == '' or w == who) then return true end
  end
  return false
end

-- P:released: item key -> '<token>:<holder>:<code>' of its last hand-back taken (modes 'release' and
-- 'died'; code 1 requeued, 3 dead-lettered), written only here and expiring with the schedule. The
-- last only: a release refunds the attempt, so an item's hand-backs have no bound, and a repeat is
-- sent within its sender's retry window, seconds, before the item is leased and handed back again.
local function took_hand_back(key, token, w, code)
  redis.call('HSET', k('released'), key, token .. ':' .. w .. ':' .. code)
  keep(k('released'), cfg.exp)
  return code
end

-- The code a repeat of the hand-back of key's lease token by holder ('' = any) answers: 2 where it
-- was taken and requeued, 3 where it dead-lettered; 0 where none was taken.
local function hand_back_taken(key, token, who)
  local tok, w, code = string.match(redis.call('HGET', k('released'), key) or '', '^(%d+):(.*):(%d)$')
  if tok ~= token or (who ~= '' and w ~= who) then return 0 end
  return code == '3' and 3 or 2
end

-- Where the next attempt of key, whose attempt on worker w just failed, goes. A failure reported
-- by a sidecar is a healthy engine failing this one item (watchdog.py STRIKES, a hang past its
-- bound, a refusal) or a pull worker dropping it, and it is often the worker's own fault (a shorter
-- context, a bad GPU that still answers /health, a worker that drops items): retried on w, the item would spend every
-- attempt there and be dead-lettered although any other worker could run it. So it goes to the
-- announced worker (meta 'workers') that has not failed it yet, was seen alive within a lease TTL
-- (P:seen, mark_seen), is not drained (common.lua), holds it in its KV cache (holdable, as a claim checks) and has
-- the least predicted work queued (P:work); ties go to the first in the announced order. A pinned
-- item (P:pin) never moves, nor does one no other worker may take: w again, as before. A prefix
-- group does not hold it back: its cache is worth less than the item, and the rest of the group,
-- which did not fail, stays where it is.
local function retry_target(key, w)
  local tried = tried_with(key, w)
  if redis.call('HEXISTS', k('pin'), key) == 1 then return w end
  local best, least = w, nil
  for _, other in ipairs(cjson.decode(redis.call('HGET', META, 'workers') or '[]')) do
    local seen = not tried[other] and not drained(cfg, other)
      and tonumber(redis.call('ZSCORE', k('seen'), other) or '')
    if seen and now - seen <= cfg.ttl and holdable({key}, capacity(other)) == 1 then
      local work = tonumber(redis.call('ZSCORE', k('work'), other) or '') or 0
      if least == nil or work < least then best, least = other, work end
    end
  end
  return best
end

-- Requeue key, which failed on holder w, at the head of its retry target's queue. Moved, its
-- planned start and finish (P:due) are its old owner's, so the steal guard forgets them: the new
-- owner is not late for an item that was never planned on it.
local function retry(key, w)
  local to = retry_target(key, w)
  if to ~= w then redis.call('HDEL', k('due'), key) end
  requeue(key, cfg, to)
end

-- Walk backwards so that LPUSH leaves the first lease at the head of the queue. Codes go to their
-- lease's slot, made up front: a table.insert at the front moved every code after it, O(n^2) in the
-- leases (a release of 10,000 took ~0.5 s; docs/experiments.md, "Delivery protocol review").
local n = (#ARGV - 4) / 2
for j = 1, n do out[j] = 0 end
for i = #ARGV - 1, 5, -2 do
  local key = ARGV[i]
  local status = lease_status(key, ARGV[i + 1], now, holder)
  local code = 0
  if status == 'current' then
    local r = get(key)
    local w = r.w
    if mode == 'release' then
      r.att = r.att - 1
      requeue(key, cfg)
      code = took_hand_back(key, ARGV[i + 1], w, 1)
    elseif mode == 'died' then
      local refunds, who = string.match(reason, '^(%d+) (.*)$')
      local dead = hand_back(key, now, tonumber(refunds), who, cfg) == 'dead'
      code = took_hand_back(key, ARGV[i + 1], w, dead and 3 or 1)
    elseif r.att >= cfg.max_attempts then
      took_failure(key, ARGV[i + 1], r.w)
      bury(key, now, reason, cfg)
      code = 3
    else
      took_failure(key, ARGV[i + 1], r.w)
      retry(key, r.w)
      code = 1
    end
  elseif mode == 'fail' and failure_taken(key, ARGV[i + 1], holder) then
    code = 2
  elseif mode ~= 'fail' and status == 'stale' then
    code = hand_back_taken(key, ARGV[i + 1], holder)
  elseif status == 'expired' then
    expire(key, now, cfg)
  end
  out[(i - 3) / 2] = code
end
flush(cfg)
out[#out + 1] = settled_flag(cfg)
return out
