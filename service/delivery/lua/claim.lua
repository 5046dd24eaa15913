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

-- The rest of head's group still in the shared FIFO, in FIFO order, taken off the FIFO. P:gfifo
-- (written at publish) lists each group's FIFO items; the entry goes now, as no item ever returns
-- to the FIFO (a requeue goes to its holder's own queue).
local function rest_of_group(head)
  local g = redis.call('HGET', k('grp'), head)
  local listed = g and redis.call('HGET', k('gfifo'), g)
  if not listed then return {} end
  redis.call('HDEL', k('gfifo'), g)
  local rest = {}
  for key in string.gmatch(listed, '[^\n]+') do
    local r = get(key)
    if key ~= head and r and r.s == 'q' and r.w == '*' then
      redis.call('LREM', k('q:*'), 1, key)
      rest[#rest + 1] = key
    end
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
