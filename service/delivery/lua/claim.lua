-- claim: lease up to max items from the head of the worker's own queue, then from the shared FIFO.
-- Prefix affinity (meta 'affinity' = '1'), as the simulator (scheduler/sim_pool.py, _bind_group):
-- the worker that takes a group's first sample from the shared FIFO takes the rest of that group
-- still there too, in FIFO order, in this same script, so no other worker can get one of them and
-- the group shares one engine's prefix cache. They join the worker's own queue (empty here: it was
-- drained first) and up to max of them are leased now; while any stay queued, the claim takes
-- nothing more from the FIFO (the simulator's worker takes shared work only with an empty queue).
-- Pinned items never sit in the FIFO (the publisher queues them on their worker), so stay put.
-- ARGV: worker, max, now ('' = server).
-- Returns a flat list of 5-tuples (key, token, deadline_ms, attempt, item_json); error NOSCHEDULE.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local w, want, now = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3])
local out = {}
local function room() return want - #out / 5 end

-- Lease up to room() items from the head of queue q (the worker's own, or the shared FIFO '*').
local function take(q)
  if room() <= 0 then return end
  local keys = redis.call('LPOP', k('q:' .. q), room())
  if keys then
    dequeued(q, keys)
    lease_all(keys, w, now, cfg, out)
  end
end

-- The rest of head's group still in the shared FIFO, in FIFO order, taken off it. Under affinity
-- publish.lua lays the FIFO out group by group, and items leave it only from the head (a requeue
-- goes to its holder's own queue), so the rest is the run of same-group items right behind head:
-- O(group), never a scan of the FIFO. P:gsize bounds the run (pinned members are not in the FIFO).
local function rest_of_group(head)
  local g = redis.call('HGET', k('grp'), head)
  local left = g and (tonumber(redis.call('HGET', k('gsize'), g)) or 1) - 1 or 0
  local rest = {}
  while left > 0 do
    local ahead = redis.call('LRANGE', k('q:*'), 0, math.min(left, 1000) - 1)
    if #ahead == 0 then break end
    local owner, n = redis.call('HMGET', k('grp'), unpack(ahead)), 0
    while n < #ahead and owner[n + 1] == g do n = n + 1 end
    if n == 0 then break end
    for _, key in ipairs(redis.call('LPOP', k('q:*'), n)) do rest[#rest + 1] = key end
    left = left - n
    if n < #ahead then break end
  end
  dequeued('*', rest)
  return rest
end

take(w)
if room() > 0 then
  if redis.call('HGET', META, 'affinity') == '1' then
    while room() > 0 do
      local head = redis.call('LPOP', k('q:*'))
      if not head then break end
      dequeued('*', {head})
      lease_all({head}, w, now, cfg, out)
      local rest, n = rest_of_group(head), room()
      adopt(rest, w, n, now, cfg, out)
      if #rest > n then break end  -- part of the group waits on the own queue: it runs next
    end
  else
    take('*')
  end
end
flush(cfg)
return out
