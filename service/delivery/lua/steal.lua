-- steal: a worker whose own queue is empty leases items from the TAIL of the queue with the most
-- predicted work left (so the longest, planned-first items stay with their owner), at most half of
-- that queue (at least one item) and at most max. The items go straight from queue to lease inside
-- this one script, so no item is ever both queued and leased, and two thieves never get the same one.
-- The KV steal gate: with a budget (the thief's free KV tokens at predicted final lengths), tail items
-- are taken only while their cumulative reservation fits it; the first that does not ends the steal
-- and stays queued, as in the simulator (scheduler/sim_engine.py, reservation_fits).
-- Pins and prefix affinity, as the simulator (scheduler/sim_pool.py): a pinned item (P:pin) is never
-- stolen, so the steal stops at the first pinned tail item; under affinity (meta 'affinity' = '1') a
-- steal moves the tail item's whole group or nothing: only if every member is still queued on the
-- victim, never started (no attempt spent), unpinned, and the group fits the budget together. The
-- group goes to the thief's own queue; up to max of it is leased now, the rest claimed as usual.
-- The deadline guard, as the simulator (scheduler/sim_pool.py, _in_time): an item with a planned
-- 'start|end' in P:due is taken only if the thief would finish it by its end, now + predicted tokens /
-- rate, where the end moves back by how late the owner is (now minus the planned start of the head of
-- its queue, if that has passed), and only if the work the thief already holds (busy ms) ends by
-- then too (else the steal just moves the end of the step to the thief), and only if the steal
-- still pays off were the item margin times longer than predicted (scheduler/deadlines.py,
-- beats_owner); the first tail item that fails ends the steal and stays queued.
-- What a cache holds, as the simulator (sim_pool.py, _steal: can_hold): a thief with a known KV
-- capacity (P:cap) takes no item it cannot hold at its cap (P:need); under affinity no group with
-- such a member; the first tail item it cannot hold ends the steal and stays queued.
-- ARGV: thief, max, now ('' = server), budget ('' = unbounded: the thief does not know its KV cache),
-- rate (the thief's decode tokens/s per sequence; '' or absent = no deadline guard), busy (ms the
-- thief's held work still takes; '' or absent = 0), margin (scheduler.deadlines.LENGTH_MARGIN;
-- '' or absent = 1: the predicted length only).
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

local function pinned(key) return redis.call('HEXISTS', k('pin'), key) == 1 end
local cap = capacity(thief)

local rate, busy = tonumber(ARGV[5] or ''), tonumber(ARGV[6] or '') or 0
local margin = tonumber(ARGV[7] or '') or 1
if rate and rate <= 0 then rate = nil end
local late = nil  -- how far the victim runs behind its plan, ms (computed on first use)
local stalled = false  -- overdue by a lease TTL with nothing of this schedule running: no guard

-- Whether the thief would finish key before its owner would (true without a rate or a deadline).
local function in_time(key)
  if not rate then return true end
  local due = redis.call('HGET', k('due'), key)
  if not due then return true end
  if late == nil then
    local head = redis.call('HGET', k('due'), redis.call('LINDEX', queue, 0) or '')
    local start = tonumber(string.match(head or '', '^(%d+)|') or '')
    late = (start and now > start) and (now - start) or 0
    -- The shift below assumes the owner starts its head NOW at plan speed; for an owner that runs
    -- nothing (engine down, sidecar gone) that projection moves with now, so a thief refused once
    -- would be refused forever. Overdue by a lease TTL (the reaper's death horizon) and idle: stalled.
    stalled = late > cfg.ttl and (tonumber(redis.call('HGET', k('counts'), 'r:' .. victim)) or 0) <= 0
  end
  if stalled then return true end
  local start, finish = string.match(due, '^(%d+)|(%d+)$')
  start, finish = tonumber(start) + late, tonumber(finish) + late
  local need = 1000 * (tonumber(get(key).pred) or 0) / rate
  return now + math.max(need, busy) <= finish and now + margin * need <= start + margin * (finish - start)
end

-- The tail item's whole group, head first, when it may move; nil when it must stay.
local function movable_group()
  local tail = redis.call('LINDEX', queue, -1)
  local g = redis.call('HGET', k('grp'), tail)
  local size = tonumber(redis.call('HGET', k('gsize'), g or '') or '0')
  local members, all = {}, redis.call('LRANGE', queue, 0, -1)
  for _, key in ipairs(all) do
    if redis.call('HGET', k('grp'), key) == g then
      if pinned(key) or get(key).att > 0 or not in_time(key) then return nil end
      members[#members + 1] = key
    end
  end
  if #members ~= size then return nil end  -- part of it was claimed, is running or done
  if holdable(members, cap) < #members then return nil end  -- a member the thief cannot hold
  if budget then
    local used = 0
    for _, key in ipairs(members) do used = used + (tonumber(get(key).res) or 0) end
    if used > budget then return nil end
  end
  return members
end

-- Prefix affinity: move the whole group to the thief's queue, lease up to max of it.
local function steal_group()
  local members = movable_group()
  if not members then return {} end
  for _, key in ipairs(members) do redis.call('LREM', queue, -1, key) end
  dequeued(victim, members)
  local out = {victim}
  adopt(members, thief, want, now, cfg, out)
  flush(cfg)
  return out
end

if redis.call('HGET', META, 'affinity') == '1' then return steal_group() end

local take = math.min(want, math.max(1, math.floor(len / 2)))
local tail, fit, used = redis.call('LRANGE', queue, -take, -1), 0, 0
for i = #tail, 1, -1 do
  if pinned(tail[i]) then break end  -- a pinned item never moves; nor what is queued before it
  if not in_time(tail[i]) then break end  -- its owner would finish it first: it and the rest stay
  if holdable({tail[i]}, cap) == 0 then break end  -- too big for the thief's cache
  used = used + (tonumber(get(tail[i]).res) or 0)
  if budget and used > budget then break end
  fit = fit + 1
end
if fit == 0 then return {} end
local keys = redis.call('RPOP', queue, fit)
dequeued(victim, keys)
local out = {victim}
lease_all(keys, thief, now, cfg, out)
flush(cfg)
return out
