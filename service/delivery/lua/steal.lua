-- steal: a worker whose own queue is empty leases items from the TAIL of the queue with the most
-- predicted work left (or the next: 'Several victims' below; the longest, planned-first items stay
-- with their owner), at most half of that queue (at least one item) and at most max, as the
-- simulator's steal (scheduler/sim_steal.py, tail_batch; tests/service/delivery/
-- test_steal_batch_parity.py holds the two alike). The items go straight from queue to lease inside
-- this one script, so no item is ever both queued and leased, and two thieves never get the same one.
-- The KV steal gate: with a budget (the thief's free KV tokens at predicted final lengths), tail items
-- are taken only while their cumulative reservation fits it; the first that does not ends the steal
-- and stays queued, as in the simulator (scheduler/sim_steal.py, tail_batch).
-- Pins and prefix affinity, as the simulator (scheduler/sim_steal.py; sim_pool.py, _steal_group): a
-- pinned item (P:pin) is never stolen, but it shields nothing: the steal passes over it (it stays
-- queued, in place) and takes the nearest unpinned items before it, however many pinned ones there
-- are: a queue holding pins is read through its list of unpinned items (index.lua). A dead worker's
-- pinned group planned last kept all 26 items of its queue from idle thieves, 18 of them unpinned; a
-- hundred pins planned last did so past SCAN items, which the steal read from the queue itself until
-- 2026-12-04. Under
-- affinity (meta 'affinity' = '1') a steal moves a whole group or nothing: the group nearest the
-- tail that may move, only if every member is still queued on the victim, never started (no attempt
-- spent), unpinned, and the group fits the budget together; or, once the victim abandoned a group
-- it ran (abandoned(), below: it died), all of the group queued there, started or not, whole or
-- partly done. A group that cannot move is passed over as a pinned item is. The group goes to the
-- thief's own queue; up to max of it is leased now, the rest claimed as usual.
-- The deadline guard, as the simulator (scheduler/sim_guard.py, in_time): an item with a planned
-- 'start|end' in P:due is taken only if the thief would finish it by its end, now + predicted tokens /
-- rate, where the end moves back by how late the owner is (now minus the planned start of the head of
-- its queue, if that has passed), and only if the work the thief already holds (busy ms) ends by
-- then too (else the steal just moves the end of the step to the thief), and only if the steal
-- still pays off were the item margin times longer than predicted (scheduler/stealguard.py,
-- beats_owner); the first tail item that fails ends the steal and stays queued.
-- What a cache holds, as the simulator (sim_steal.py, tail_batch: can_hold): a thief with a known KV
-- capacity (P:cap) takes no item it cannot hold at its cap (P:need); under affinity no group with
-- such a member. Like a pinned one, such an item (group) stays queued, in place, and shields
-- nothing: the steal passes over it (a small-cache thief got nothing from a queue whose tail item
-- had a long prompt, though smaller items sat right before it), any number of them: a thief whose
-- cache is below some P:need reads the victim's list of what its cache holds (P:h:<cap>:<victim>,
-- index.lua; under affinity the items of groups it holds whole, P:gneed, so such groups do not count
-- toward SCAN: 64 items of them at the tail hid every group before them until 2026-12-04). So is an
-- item whose attempt on the thief failed (P:tried), without affinity: its retry was sent away from
-- the thief on purpose.
-- Several victims, as the simulator (sim_pool.py, _victims): when the busiest queue has nothing for
-- THIS thief for a reason that time does not change (every item pinned, too big for the thief's
-- cache or failed by it, or under affinity no group there can move within SCAN of its tail), the steal tries the
-- next queue by P:work, up to VICTIMS queues per call (a steal stays O(bounded)); otherwise an idle
-- small worker starved while a queue it could drain waited behind one it never can. A refusal by
-- the KV steal gate or the deadline guard ends the steal at once: both change only with time (the thief's in-flight work
-- ending, the owner falling behind), and a thief with nothing in flight always passes the KV gate
-- for an item it can hold (its reservation is at most its need, which fits the cap).
-- A worker the request drained (common.lua, drained) steals nothing, as the simulator's excluded ones.
-- ARGV: thief, max, now ('' = server), budget ('' = unbounded: the thief does not know its KV cache),
-- rate (the thief's decode tokens/s per sequence; '' or absent = no deadline guard), busy (ms the
-- thief's held work still takes; '' or absent = 0), margin (scheduler.stealguard.LENGTH_MARGIN;
-- '' or absent = 1: the predicted length only), call id ('' or absent: none; as claim's).
-- Returns {victim, then 5-tuples as claim}; {} when there is nothing to steal or nothing fits.
local VICTIMS = 4  -- queues one steal may look at: the busiest first, then the next while skipped
local SCAN = 64  -- items one steal passes over in the list it reads (too big; sim_steal.py's STEAL_SCAN)
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

local cap = capacity(thief)
local affinity = redis.call('HGET', META, 'affinity') == '1'

local rate, busy = tonumber(ARGV[5] or ''), tonumber(ARGV[6] or '') or 0
local margin = tonumber(ARGV[7] or '') or 1
if rate and rate <= 0 then rate = nil end

-- The victim under examination: its name, its queue key, the list a steal reads its tail from (the
-- queue, or one of its steal indexes, index.lua: only unpinned items, or only those this thief's
-- cache holds) and whether that list holds only items the thief holds, how far it runs behind its
-- plan (ms, computed on first use) and whether it is stalled (overdue by a lease TTL with nothing
-- of this schedule running: no guard). Reset per victim.
local victim, queue, look, held, late, stalled = nil, nil, nil, false, nil, false

-- Whether key is queued on the victim, as its record says. A steal index read in place of the queue
-- (index.lua) holds only such items while every script keeps it in step; one that an older release's
-- script kept otherwise (a sidecar not yet upgraded: its claims pop the lists by its own rule) may
-- name an item running or queued elsewhere, which a steal must never lease: it is passed over.
local function queued_here(key)
  local r = get(key)
  return r ~= nil and r.s == 'q' and r.w == victim
end

-- Take keys off the victim's queue (each near its tail) and off its steal indexes.
local function unqueue(keys)
  for _, key in ipairs(keys) do redis.call('LREM', queue, -1, key) end
  index_drop(cfg, victim, keys)
end

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

-- Under prefix affinity the victim's queue (look: pinned groups are not in an index) as read so far
-- from its tail: tail[i] is its i-th key from the tail, tgrp[i] that key's group (P:grp) and tpin[i]
-- whether it is pinned (P:pin); scanned maps each group to its members queued there, head first,
-- once the whole list was read (scan_groups). Reset per victim.
local tail, tgrp, tpin, scanned = {}, {}, {}, nil

-- Read the victim's queue to at least n items from its tail (never past len): exactly n the first
-- time (the tail group), then doubling, so a walk past a few groups costs a few calls.
local function read_tail(n, len)
  local seen = #tail
  if n <= seen then return end
  local chunk = redis.call('LRANGE', look, -math.min(len, math.max(n, 2 * seen)), -(seen + 1))
  local groups, pins = redis.call('HMGET', k('grp'), unpack(chunk)), redis.call('HMGET', k('pin'), unpack(chunk))
  for i = #chunk, 1, -1 do tail[#tail + 1], tgrp[#tgrp + 1], tpin[#tpin + 1] = chunk[i], groups[i], pins[i] end
end

-- Every group's members queued on the victim, head first: one scan of the queue in chunked HMGETs,
-- at most once per victim and steal (for a group that is not one run on the queue).
local function scan_groups()
  if scanned then return scanned end
  scanned = {}
  for i = 0, redis.call('LLEN', look) - 1, 1000 do
    local chunk = redis.call('LRANGE', look, i, i + 999)
    local groups = redis.call('HMGET', k('grp'), unpack(chunk))
    for j, key in ipairs(chunk) do
      local g = groups[j]
      if g then
        scanned[g] = scanned[g] or {}
        table.insert(scanned[g], key)
      end
    end
  end
  return scanned
end

-- Whether one of keys is pinned (P:pin), in chunks that unpack accepts.
local function any_pinned(keys)
  for i = 1, #keys, 1000 do
    for _, pin in ipairs(redis.call('HMGET', k('pin'), unpack(keys, i, math.min(i + 999, #keys)))) do
      if pin then return true end
    end
  end
  return false
end

-- The members of group g (size samples) queued on the victim, head first, the tail-most of them
-- pos items from its tail, and whether one has started (spent an attempt); nil when one is pinned.
-- Plans mostly lay a group out in one run, and a queue loses items only at its head (claims) or
-- whole groups near its tail (steals), so the group is usually the size items from pos on: those
-- alone are read, O(group). A steal used to read the group of every queued item, one HGET each: 14 ms
-- of Redis per steal at 2,048 queued (1 ms at 256; a loaded 2-core host), and idle thieves retry
-- every idle poll. A group that is not one run (seen: lpt plans split one group per queue) costs one
-- scan of the queue in chunked HMGETs, which decides as before (whole but interleaved: it moves).
local function queued_members(g, size, pos, len)
  local last, members, pinned = pos + size - 1, {}, false  -- (larger groups: scanned, as unpack
  if size <= 1000 and last <= len then                        -- takes no more)
    read_tail(last, len)
    for i = last, pos, -1 do
      if tgrp[i] ~= g then members = nil break end
      members[#members + 1], pinned = tail[i], pinned or tpin[i]
    end
  else
    members = nil
  end
  if not members then
    members = scan_groups()[g] or {}
    pinned = any_pinned(members)
  end
  if pinned then return nil end
  local started = false
  for _, key in ipairs(members) do
    if not queued_here(key) then return nil end
    started = started or get(key).att > 0
  end
  return members, started
end

-- Whether a group read from a small-cache steal index (under affinity: only groups the thief holds
-- whole, P:gneed) is one the thief holds whole, as its first member's P:gneed says. An older
-- release's script (a reaper or sidecar not yet upgraded, up to 6ed67cb) pushes a requeued item by
-- its own P:need, and a claim by this release pops it by P:gneed, leaving the entry: such a member of
-- a group too big for the thief then sits in the list without the rest of its group, or twice after
-- a second requeue. A steal took it alone from a dead victim, splitting its group, and leased a
-- twice-listed item twice (two leases of one item, the victim's other member left queued but
-- counted nowhere; docs/experiments.md, "Mixed-version roll").
local function held_whole(key)
  if look == queue or not held then return true end
  local need = tonumber(redis.call('HGET', k('gneed'), key) or '')
  return not (need and cap and need > cap)
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

-- The whole group of the item pos from the victim's tail (or all an abandoned victim holds of it),
-- head first; or 'pass' when it can never leave the victim for this thief now (a member pinned or
-- too big for the thief's cache; part of the group running or done, or a member started, on a
-- victim that has not abandoned it): the thief looks at the group before it; 'stop' when it may
-- move later (the KV steal gate or the deadline guard refuses it now). Checked in the simulator's order. A group its victim may yet
-- abandon is passed, not a 'stop', although time may change it: a live owner's started group must
-- not keep thieves from every other group; the next steal looks again.
local function movable_group(pos, len)
  local g = tgrp[pos]
  if tpin[pos] then return 'pass' end  -- its tail-most member is pinned: read no more of it
  if not held_whole(tail[pos]) then return 'pass' end  -- listed by an older release's rule
  local size = tonumber(redis.call('HGET', k('gsize'), g or '') or '0')
  if not g or size < 1 then return 'pass' end  -- not a known group: it never moves whole
  local members, started = queued_members(g, size, pos, len)
  if not members then return 'pass' end
  local gone = (started or #members ~= size) and abandoned(members)
  if #members ~= size and not gone then return 'pass' end  -- part of it is running or done there
  if started and not gone then return 'pass' end  -- it stays with its worker's prefix cache
  if holdable(members, cap) < #members then return 'pass' end  -- a member the thief cannot hold
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

-- Prefix affinity: the nearest group to the victim's tail that may move, within SCAN unpinned items
-- of it (len: how many look holds), moves whole to the thief's queue, up to max of it leased now;
-- 'skip' or 'stop' when none moves.
local function steal_group(len)
  tail, tgrp, tpin, scanned = {}, {}, {}, nil
  local judged, members = {}, 'skip'
  for pos = 1, math.min(len, SCAN) do
    read_tail(pos, len)
    if not judged[tgrp[pos]] then  -- each group is judged once, at its tail-most member
      judged[tgrp[pos]] = true
      members = movable_group(pos, len)
      if members ~= 'pass' then break end
    end
  end
  if members == 'pass' then return 'skip' end
  if type(members) == 'string' then return members end
  unqueue(members)
  dequeued(victim, members)
  local out = {victim}
  adopt(members, thief, want, now, cfg, out)
  remember_call(thief, 'steal', call, victim, out, 2, cfg)
  flush(cfg)
  return out
end

-- Whether the thief is among the workers whose attempt at an item failed (a P:tried value, worker
-- ids joined by spaces; nil: none failed it). Its retry was sent to another worker's queue, one
-- that had not failed it (release.lua, retry_target): stolen back by the worker that just failed
-- it (idle, as a failing worker often is at the tail of a step), it spent its attempts there again.
local function failed_by(workers)
  return workers and string.find(' ' .. workers .. ' ', ' ' .. thief .. ' ', 1, true) ~= nil
end

-- The tail items the thief takes, tail first, and why it took no more: 'skip' (nothing more it may
-- take before SCAN items were passed over) or 'stop' (the deadline guard or the KV steal gate: this
-- thief waits) or nil (it took all it may); at most half the queue (len items; free: how many the
-- list read holds). Pinned items, those too big for the thief's cache and those it failed, are passed over: they
-- stay queued, in place, and the nearest items before them are taken. SCAN bounds the items passed
-- over, not the walk: bounding the walk had cut every steal to SCAN items, below half the queue and
-- max. Where the victim's queue has a steal index (index.lua) the list read holds none of the
-- pinned ones, nor, for a thief whose cache is below some item's need, of the ones too big for it:
-- any number of them is passed at no cost (a hundred pins planned last, or long documents with
-- short answers, shielded every item before them). The tail is read in chunks (the first of the
-- steal's size, then doubling): a queue without pins costs what it did, one LRANGE and one HMGET of
-- P:pin over the steal (and one of P:need for a thief with a cap, unless the list read holds only
-- what it holds).
local function tail_fit(len, free)
  local take = math.min(want, math.max(1, math.floor(len / 2)))
  local limit = math.min(free, take + SCAN)
  local fit, used, seen, passed = {}, 0, 0, 0
  local any_failed = redis.call('EXISTS', k('tried')) == 1  -- P:tried: only after a failure
  while seen < limit do
    local n = math.min(limit - seen, math.max(take, seen))
    local chunk = redis.call('LRANGE', look, -(seen + n), -(seen + 1))
    local pins = look == queue and redis.call('HMGET', k('pin'), unpack(chunk)) or {}
    local needs = cap and not held and redis.call('HMGET', k('need'), unpack(chunk)) or {}
    local failed = any_failed and redis.call('HMGET', k('tried'), unpack(chunk)) or {}
    for i = #chunk, 1, -1 do
      local key = chunk[i]
      -- a pinned item never moves, nor one too big for the thief's cache, nor one the thief failed
      -- (its retry went elsewhere: release.lua, retry_target): look at what precedes it
      if pins[i] or (needs[i] and tonumber(needs[i]) > cap) or failed_by(failed[i]) or not queued_here(key) then
        passed = passed + 1
        if passed == SCAN then return fit, 'skip' end
      else
        used = used + (tonumber(get(key).res) or 0)
        if budget and used > budget then return fit, 'stop' end
        if not in_time(key) then return fit, 'stop' end  -- its owner would finish it first
        fit[#fit + 1] = key
        if #fit == take then return fit, nil end
      end
    end
    seen = seen + #chunk
  end
  return fit, 'skip'
end

-- Lease up to half of the victim's queue from its tail; 'skip' or 'stop' when nothing fits.
local function steal_tail(len, free)
  local keys, why = tail_fit(len, free)
  if #keys == 0 then return why end
  unqueue(keys)
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
    look, held = steal_list(cfg, v, cap)
    look = look or queue
    local len, got = redis.call('LLEN', queue), 'skip'
    local free = look == queue and len or redis.call('LLEN', look)  -- 0: nothing it may take: skip
    if len == 0 then
      redis.call('ZREM', k('work'), victim)  -- a stale score: nothing queued there
    elseif free == 0 then
      got = 'skip'
    elseif affinity then
      got = steal_group(free)
    else
      got = steal_tail(len, free)
    end
    if got == 'stop' then return {} end
    if got ~= 'skip' then return got end
  end
end
return {}
