-- steal: a worker whose own queue is empty leases items from the TAIL of the queue with the most
-- predicted work left (or the next: 'Several victims' below; the longest, planned-first items stay
-- with their owner), at most half of
-- that queue (at least one item) and at most max. The items go straight from queue to lease inside
-- this one script, so no item is ever both queued and leased, and two thieves never get the same one.
-- The KV steal gate: with a budget (the thief's free KV tokens at predicted final lengths), tail items
-- are taken only while their cumulative reservation fits it; the first that does not ends the steal
-- and stays queued, as in the simulator (scheduler/sim_engine.py, reservation_fits).
-- Pins and prefix affinity, as the simulator (scheduler/sim_pool.py): a pinned item (P:pin) is never
-- stolen, so the steal from that victim stops at the first pinned tail item; under affinity (meta
-- 'affinity' = '1') a steal moves the tail item's whole group or nothing: only if every member is
-- still queued on the victim, never started (no attempt spent), unpinned, and the group fits the
-- budget together; or, once the victim abandoned a group it ran (abandoned(), below: it died), all
-- of the group queued there, started or not, whole or partly done. The group goes to the thief's
-- own queue; up to max of it is leased now, the rest claimed as usual.
-- The deadline guard, as the simulator (scheduler/sim_pool.py, _in_time): an item with a planned
-- 'start|end' in P:due is taken only if the thief would finish it by its end, now + predicted tokens /
-- rate, where the end moves back by how late the owner is (now minus the planned start of the head of
-- its queue, if that has passed), and only if the work the thief already holds (busy ms) ends by
-- then too (else the steal just moves the end of the step to the thief), and only if the steal
-- still pays off were the item margin times longer than predicted (scheduler/stealguard.py,
-- beats_owner); the first tail item that fails ends the steal and stays queued.
-- What a cache holds, as the simulator (sim_pool.py, _steal: can_hold): a thief with a known KV
-- capacity (P:cap) takes no item it cannot hold at its cap (P:need); under affinity no group with
-- such a member; the first tail item it cannot hold ends the steal from that victim and stays queued.
-- Several victims, as the simulator (sim_pool.py, _victims): when the busiest queue has nothing for
-- THIS thief for a reason that time does not change (its tail is pinned, too big for the thief's
-- cache, or under affinity its group cannot move), the steal tries the next queue by P:work, up to
-- VICTIMS queues per call (a steal stays O(bounded)); otherwise an idle small worker starved while a
-- queue it could drain waited behind one it never can. A refusal by the KV steal gate or the
-- deadline guard ends the steal at once: both change only with time (the thief's in-flight work
-- ending, the owner falling behind), and a thief with nothing in flight always passes the KV gate
-- for an item it can hold (its reservation is at most its need, which fits the cap).
-- A worker the request drained (common.lua, drained) steals nothing, as the simulator's excluded ones.
-- ARGV: thief, max, now ('' = server), budget ('' = unbounded: the thief does not know its KV cache),
-- rate (the thief's decode tokens/s per sequence; '' or absent = no deadline guard), busy (ms the
-- thief's held work still takes; '' or absent = 0), margin (scheduler.stealguard.LENGTH_MARGIN;
-- '' or absent = 1: the predicted length only), call id ('' or absent: none; as claim's).
-- Returns {victim, then 5-tuples as claim}; {} when there is nothing to steal or nothing fits.
local VICTIMS = 4  -- queues one steal may look at: the busiest first, then the next while skipped
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local thief, want, now, budget = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3]), tonumber(ARGV[4])
pulse(cfg, ARGV[3])  -- first: an outage's grace before any lease is judged (common.lua)
local call = ARGV[8]
if drained(cfg, thief) then return {} end  -- a drained worker steals nothing (common.lua)
mark_seen(thief, now, cfg)
local again, stolen_from = replayed_call(thief, 'steal', call)
if again then
  if #again == 0 then return {} end
  table.insert(again, 1, stolen_from)
  return again
end
if redis.call('LLEN', k('q:' .. thief)) > 0 then return {} end

local function pinned(key) return redis.call('HEXISTS', k('pin'), key) == 1 end
local cap = capacity(thief)
local affinity = redis.call('HGET', META, 'affinity') == '1'

local rate, busy = tonumber(ARGV[5] or ''), tonumber(ARGV[6] or '') or 0
local margin = tonumber(ARGV[7] or '') or 1
if rate and rate <= 0 then rate = nil end

-- The victim under examination: its name, its queue key, how far it runs behind its plan (ms,
-- computed on first use) and whether it is stalled (overdue by a lease TTL with nothing of this
-- schedule running: no guard). Reset per victim.
local victim, queue, late, stalled = nil, nil, nil, false

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

-- The members of group g (size samples) queued on the victim, head first, and whether one has
-- started (spent an attempt); nil when one is pinned. Plans mostly lay a group out in one run, and
-- a queue loses items only at its head (claims) or whole groups at its tail (steals), so the tail
-- group is usually the last size items: those alone are read, O(group). A steal used to read the group of every queued item, one HGET each: 14 ms
-- of Redis per steal at 2,048 queued (1 ms at 256; a loaded 2-core host), and idle thieves retry
-- every idle poll. A tail that is not one whole run (seen: lpt plans split one group per queue) costs
-- a scan of the queue in chunked HMGETs, which decides as before (whole but interleaved: it moves).
local function queued_members(g, size)
  local members, run = {}, size <= 1000  -- (larger groups: scanned, as unpack takes no more)
  if run then
    members = redis.call('LRANGE', queue, -size, -1)
    local owners = redis.call('HMGET', k('grp'), unpack(members))
    run = #members == size
    for i = 1, #members do run = run and owners[i] == g end
  end
  if not run then
    members = {}
    for i = 0, redis.call('LLEN', queue) - 1, 1000 do
      local chunk = redis.call('LRANGE', queue, i, i + 999)
      local groups = redis.call('HMGET', k('grp'), unpack(chunk))
      for j, key in ipairs(chunk) do
        if groups[j] == g then members[#members + 1] = key end
      end
    end
  end
  local started = false
  for _, key in ipairs(members) do
    if pinned(key) then return nil end
    started = started or get(key).att > 0
  end
  return members, started
end

-- Whether the victim abandoned what it holds of a group it has run (a member started, or a group no
-- longer whole on its queue: part of it finished there): it runs nothing of this schedule, and each
-- member it ever leased (its record keeps that lease's deadline once back in the queue, a refunded
-- release included) saw that lease end more than a lease TTL ago, so the victim had a whole TTL to
-- take it back and did not (a live sidecar claims its queue head at its next poll; the reaper deems
-- a worker dead after one TTL without a heartbeat). Only a dead worker's group (its own, or one it
-- stole) gets here; without this it stayed queued until the trainer cancelled the step. Its
-- engine's prefix cache, the reason a started group stays, is gone with it; what is left of the
-- group still moves together, to one thief, for that thief's cache. Its old tokens stay refused:
-- each requeue ended them, and the thief leases anew. No member ever leased: no sign of a death
-- (a plan that split the group over queues; that part never moves whole).
local function abandoned(members)
  if (tonumber(redis.call('HGET', k('counts'), 'r:' .. victim)) or 0) > 0 then return false end
  local leased = false
  for _, key in ipairs(members) do
    local r = get(key)
    if r.dl > 0 then
      if now <= r.dl + cfg.ttl then return false end
      leased = true
    end
  end
  return leased
end

-- The tail item's whole group (or all an abandoned victim holds of it), head first; or 'skip' when
-- it cannot move to this thief (a member pinned or too big for its cache; part of the group running
-- or done, or a member started, on a victim that has not abandoned it), 'stop' when it may later
-- (the KV steal gate or the deadline guard refuses it now). Checked in the simulator's order. A
-- group its victim may yet abandon is a 'skip', not a 'stop', although time may change it: a live
-- owner's started group must not keep thieves from every other queue; the next steal looks again.
local function movable_group()
  local tail = redis.call('LINDEX', queue, -1)
  local g = redis.call('HGET', k('grp'), tail)
  local size = tonumber(redis.call('HGET', k('gsize'), g or '') or '0')
  if not g or size < 1 then return 'skip' end  -- not a known group: it never moves whole
  local members, started = queued_members(g, size)
  if not members then return 'skip' end
  local gone = (started or #members ~= size) and abandoned(members)
  if #members ~= size and not gone then return 'skip' end  -- part of it is running or done there
  if started and not gone then return 'skip' end  -- it stays with its worker's prefix cache
  if holdable(members, cap) < #members then return 'skip' end  -- a member the thief cannot hold
  if budget then
    local used = 0
    for _, key in ipairs(members) do used = used + (tonumber(get(key).res) or 0) end
    if used > budget then return 'stop' end
  end
  if gone then return members end  -- an abandoned victim is stalled: no deadline guard
  for _, key in ipairs(members) do
    if not in_time(key) then return 'stop' end
  end
  return members
end

-- Prefix affinity: move the whole group to the thief's queue, lease up to max of it.
local function steal_group()
  local members = movable_group()
  if type(members) == 'string' then return members end
  for _, key in ipairs(members) do redis.call('LREM', queue, -1, key) end
  dequeued(victim, members)
  local out = {victim}
  adopt(members, thief, want, now, cfg, out)
  remember_call(thief, 'steal', call, victim, out, 2, cfg)
  flush(cfg)
  return out
end

-- How many tail items the thief takes, and why it took no more: 'skip' (a pinned item or one too
-- big for its cache: nothing behind it moves to this thief either) or 'stop' (the deadline guard
-- or the KV steal gate: this thief waits) or nil (it took all it may).
local function tail_fit(len)
  local take = math.min(want, math.max(1, math.floor(len / 2)))
  local tail, fit, used = redis.call('LRANGE', queue, -take, -1), 0, 0
  for i = #tail, 1, -1 do
    if pinned(tail[i]) then return fit, 'skip' end  -- a pinned item never moves; nor what precedes it
    if holdable({tail[i]}, cap) == 0 then return fit, 'skip' end  -- too big for the thief's cache
    used = used + (tonumber(get(tail[i]).res) or 0)
    if budget and used > budget then return fit, 'stop' end
    if not in_time(tail[i]) then return fit, 'stop' end  -- its owner would finish it first
    fit = fit + 1
  end
  return fit, nil
end

-- Lease up to half of the victim's queue from its tail; 'skip' or 'stop' when nothing fits.
local function steal_tail(len)
  local fit, why = tail_fit(len)
  if fit == 0 then return why end
  local keys = redis.call('RPOP', queue, fit)
  dequeued(victim, keys)
  local out = {victim}
  lease_all(keys, thief, now, cfg, out)
  remember_call(thief, 'steal', call, victim, out, 2, cfg)
  flush(cfg)
  return out
end

-- The busiest queues first; the next only while the one before had nothing for this thief ever.
local tried = 0
for _, v in ipairs(redis.call('ZREVRANGE', k('work'), 0, VICTIMS)) do
  if v ~= thief and tried < VICTIMS then
    tried = tried + 1
    victim, queue, late, stalled = v, k('q:' .. v), nil, false
    local len, got = redis.call('LLEN', queue), 'skip'
    if len == 0 then
      redis.call('ZREM', k('work'), victim)  -- a stale score: nothing queued there
    elseif affinity then
      got = steal_group()
    else
      got = steal_tail(len)
    end
    if got == 'stop' then return {} end
    if got ~= 'skip' then return got end
  end
end
return {}
