-- claim: lease up to max items from the head of the worker's own queue, then from the shared FIFO.
-- Prefix affinity (meta 'affinity' = '1'), as the simulator (scheduler/sim_pool.py, _bind_group):
-- the worker that takes a group's first sample from the shared FIFO takes the rest of that group
-- still there too, in FIFO order, in this same script, so no other worker can get one of them and
-- the group shares one engine's prefix cache. They join the worker's own queue (empty here: it was
-- drained first) and up to max of them are leased now; while any stay queued, the claim takes
-- nothing more from the FIFO (the simulator's worker takes shared work only with an empty queue).
-- Pinned items never sit in the FIFO (the publisher queues them, under affinity with their whole
-- group, on their worker), so stay put.
-- What a cache holds, as the simulator (sim_pool.py, _holds): a worker with a known KV capacity
-- (P:cap) takes a FIFO head only if it holds it at its cap (P:need), under affinity only if it holds
-- every sample of the head's group; otherwise the head waits for a worker that can, and this claim
-- takes nothing more from the FIFO (no skipping: the FIFO is served in order, as the simulator's).
-- A worker the request drained (common.lua, drained) leases nothing: not from the shared FIFO either.
-- ARGV: worker, max, now ('' = server), call id ('' or absent: none; a re-sent call with the same
-- id answers its first run's leases, common.lua 'Re-sent claims and steals').
-- Returns a flat list of 5-tuples (key, token, deadline_ms, attempt, item_json); error NOSCHEDULE.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local w, want, now, call = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3]), ARGV[4]
pulse(cfg, ARGV[3])  -- first: an outage's grace before any lease is judged (common.lua)
if drained(cfg, w) then return {} end  -- it takes nothing, nor counts as a live retry target
mark_seen(w, now, cfg)
local again = replayed_call(w, 'claim', call)
if again then return again end
local out = {}
local function room() return want - #out / 5 end

-- Lease up to n items from the head of queue q (the worker's own, or the shared FIFO '*').
local function take(q, n)
  if n <= 0 then return end
  local keys = redis.call('LPOP', k('q:' .. q), n)
  if keys then
    index_pop(cfg, q, keys)  -- they head the queue's steal indexes too (index.lua)
    dequeued(q, keys)
    lease_all(keys, w, now, cfg, out)
  end
end

-- The FIFO's head group: its head and the run of same-group items right behind it, left in place.
-- Under affinity publish.lua lays the FIFO out group by group, and items leave it only from the head
-- (a requeue goes to its holder's own queue), so the rest of the head's group is that run: O(group),
-- never a scan of the FIFO. P:gsize bounds the run (pinned groups are not in the FIFO).
local function head_group()
  local head = redis.call('LINDEX', k('q:*'), 0)
  if not head then return nil end
  local g = redis.call('HGET', k('grp'), head)
  local left = g and (tonumber(redis.call('HGET', k('gsize'), g)) or 1) - 1 or 0
  local group = {head}
  while left > 0 do
    local ahead = redis.call('LRANGE', k('q:*'), #group, #group + math.min(left, 1000) - 1)
    local owner, n = #ahead > 0 and redis.call('HMGET', k('grp'), unpack(ahead)) or {}, 0
    while n < #ahead and owner[n + 1] == g do
      n = n + 1
      group[#group + 1] = ahead[n]
    end
    left = left - n
    if n == 0 or n < #ahead then break end
  end
  return group
end

-- Prefix affinity: bind whole head groups to w while it has room and holds them.
local function claim_groups(cap)
  while room() > 0 do
    local group = head_group()
    if not group or holdable(group, cap) < #group then break end
    redis.call('LTRIM', k('q:*'), #group, -1)
    dequeued('*', group)
    lease_all({group[1]}, w, now, cfg, out)
    local rest, n = {}, room()
    for i = 2, #group do rest[#rest + 1] = group[i] end
    adopt(rest, w, n, now, cfg, out)
    if #rest > n then break end  -- part of the group waits on the own queue: it runs next
  end
end

take(w, room())
if room() > 0 then
  local cap = capacity(w)
  if redis.call('HGET', META, 'affinity') == '1' then
    claim_groups(cap)
  elseif cap then  -- only the run of FIFO heads w holds
    take('*', holdable(redis.call('LRANGE', k('q:*'), 0, room() - 1), cap))
  else
    take('*', room())
  end
end
remember_call(w, 'claim', call, '', out, 1, cfg)
flush(cfg)
return out
