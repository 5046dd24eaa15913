-- Shared preamble of every delivery script (scripts.py prepends it to each operation).
-- KEYS[1] is the schedule's meta key '<prefix>:{<sid>}:meta'; every other key is derived from it and
-- carries the same {sid} hash tag, so all of them are in KEYS[1]'s hash slot (Redis Cluster safe).
--
-- Each item has one record in hash P:st, 'state|token|attempts|deadline_ms|predicted|worker|reserve',
-- with state q queued, r running (leased), d done, x dead-lettered, c cancelled; worker is the queue
-- holding it or the lease holder (a done item's deadline_ms: its result's stream id's ms, complete.lua;
-- an older release's, its lease's deadline); reserve is the KV tokens it holds at its predicted final length
-- (the steal gate). Scripts read records through a cache and write every change back in ONE HSET at
-- the end (flush), with the counters, the deadline index and the steal scores: few calls per batch.
local META = KEYS[1]
local B = string.sub(META, 1, -6)
local function k(s) return B .. ':' .. s end

-- Redis Cluster resharding. Only KEYS[1] is declared, so while an operator moves this slot to another
-- master (MIGRATING here, or IMPORTING here for a client sent on by ASK) the cluster judges each key
-- the script touches, and refuses one not on this node mid-script, after the writes before it (a
-- claim had popped its items and never leased them: lost). Two keys that never exist are refused
-- exactly while the slot is open, so touch them first and answer TRYAGAIN before anything is written:
-- the cluster client retries until the slot has settled (tests/deploy/test_cluster_reshard.py). A
-- stable slot, or a single server, pays one EXISTS.
local slot_check = redis.pcall('EXISTS', k('~'), k('~~'))
if type(slot_check) == 'table' and slot_check.err then
  return redis.error_reply("TRYAGAIN the schedule's hash slot is moving between cluster nodes")
end

-- Milliseconds: the caller's explicit clock when given (tests, simulations), else the server's TIME,
-- so workers with skewed clocks still agree on every deadline.
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(x) return string.format('%d', x) end

-- Re-apply the schedule's absolute expiry to a key this script may have (re)created.
local function keep(key, exp)
  if redis.call('PTTL', key) == -1 then redis.call('PEXPIREAT', key, exp) end
end

-- One command over many arguments, in chunks that Lua's unpack accepts (~8,000; pairs stay
-- aligned). 4,000 rather than 1,000: an HSET of more than hash-max-listpack-entries (512) new fields
-- makes the hash a hashtable up front, where 500 fields went into a listpack first, each insert
-- scanning it (1,024 records of under 64 bytes, P:st or P:due: ~3 ms against ~1 ms). The final
-- encoding is the same either way: a hash past 512 fields is converted on the next chunk anyway.
local function bulk(cmd, key, args)
  for i = 1, #args, 4000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
  end
end

-- Settings every mutating script needs; nil when the schedule is unknown or expired. drained is the
-- meta field as stored (a JSON list of worker ids; nil when the request drained none), read here so
-- that a claim on a schedule without a drain pays no command more for the check (drained, below);
-- pinq, holds and affinity, the same way, say which steal indexes there are (index.lua).
local function settings()
  local m = redis.call('HMGET', META, 'lease_ttl_ms', 'max_attempts', 'expire_at_ms', 'total', 'drained', 'pulse',
    'graced', 'pinq', 'holds', 'affinity')
  if not m[1] then return nil end
  return {ttl = tonumber(m[1]), max_attempts = tonumber(m[2]), exp = tonumber(m[3]), total = tonumber(m[4]),
    drained = m[5] or nil, pulse = tonumber(m[6] or ''), graced = m[7] ~= false, pinq = m[8] or nil,
    holds = m[9] or nil, affinity = m[10] == '1'}
end

-- The steal indexes' upkeep (index.lua, prepended after this file, assigns them): requeue and adopt
-- keep a queue's lists of what thieves may take in step with the queue.
local index_push, index_pop, index_drop

-- Whether the request drained worker w (POST /schedule 'drain: true'): it takes nothing of this
-- schedule, as the simulator's excluded workers (scheduler/sim_pool.py): its claim and its steal
-- lease nothing (its sidecar may still run: one drains a worker to take it down or because it
-- misbehaves) and a failed item's retry never picks it (release.lua). It holds nothing here to
-- finish: it was given no queue, and it took nothing.
local function drained(cfg, w)
  if not cfg.drained then return false end
  if not cfg.drained_set then
    cfg.drained_set = {}
    for _, d in ipairs(cjson.decode(cfg.drained)) do cfg.drained_set[d] = true end
  end
  return cfg.drained_set[w] == true
end

local cache, dirty, counts, work = {}, {}, {}, {}

-- One packed P:st record as a table (what get caches and flush writes back).
local function parse(v)
  -- reserve may be empty: a record written before the steal gate existed reserves nothing
  local s, tok, att, dl, pred, w, res = string.match(v, '^(%a)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)|?(%d*)$')
  return {s = s, tok = tok, att = tonumber(att), dl = tonumber(dl), pred = pred, w = w, res = res}
end

local function get(key)
  local r = cache[key]
  if r == nil then
    local v = redis.call('HGET', k('st'), key)
    if not v then return nil end
    r = parse(v)
    cache[key] = r
  end
  return r
end

local function count(state, w, delta)
  counts[state] = (counts[state] or 0) + delta
  local f = state .. ':' .. w
  counts[f] = (counts[f] or 0) + delta
end

-- Seconds per predicted token of worker w (P:pace, from the plan; '*' holds the default), cached.
local paces = {}
local function pace(w)
  local p = paces[w]
  if p == nil then
    p = tonumber(redis.call('HGET', k('pace'), w) or redis.call('HGET', k('pace'), '*') or '1')
    paces[w] = p
  end
  return p
end

-- Predicted tokens entering (+) or leaving (-) worker w's queue, scored in predicted SECONDS of that
-- worker (P:work ranks steal victims by time, as the simulator does); the shared FIFO is never one.
local function work_delta(w, delta)
  if w ~= '*' then work[w] = (work[w] or 0) + delta * pace(w) end
end

-- Write back every changed record, the deadline index, counters and steal scores.
local function flush(cfg)
  local st, zadd, zrem = {}, {}, {}
  for key, _ in pairs(dirty) do
    local r = cache[key]
    st[#st + 1] = key
    st[#st + 1] = r.s .. '|' .. r.tok .. '|' .. r.att .. '|' .. int(r.dl) .. '|' .. r.pred .. '|' .. r.w .. '|' .. r.res
    if r.s == 'r' then
      zadd[#zadd + 1] = int(r.dl)
      zadd[#zadd + 1] = key
    else
      zrem[#zrem + 1] = key
    end
  end
  if #st > 0 then bulk('HSET', k('st'), st) end
  if #zadd > 0 then
    bulk('ZADD', k('deadlines'), zadd)
    keep(k('deadlines'), cfg.exp)
  end
  if #zrem > 0 then bulk('ZREM', k('deadlines'), zrem) end
  for f, d in pairs(counts) do
    if d ~= 0 then redis.call('HINCRBY', k('counts'), f, d) end
  end
  for w, d in pairs(work) do
    if redis.call('LLEN', k('q:' .. w)) == 0 then
      redis.call('ZREM', k('work'), w)
    elseif d ~= 0 then
      redis.call('ZINCRBY', k('work'), d, w)
      if d > 0 then keep(k('work'), cfg.exp) end  -- only a requeue can (re)create the key
    end
  end
end

-- The whole JSON of each item: P:items holds '<ref>\t<JSON without payload>' and P:prompts the
-- payload under ref (one per prompt, publish.lua); a value without a tab is a whole JSON already
-- (a schedule published before payloads were shared).
local function item_jsons(keys)
  local items = redis.call('HMGET', k('items'), unpack(keys))
  local bodies, refs, wanted = {}, {}, {}
  for i = 1, #keys do
    local v = items[i]
    local tab = v and string.find(v, '\t', 1, true)
    if tab then
      bodies[i], refs[i] = string.sub(v, tab + 1), string.sub(v, 1, tab - 1)
      if tab > 1 then wanted[#wanted + 1] = refs[i] end
    end
  end
  local at = {}
  if #wanted > 0 then
    local payloads = redis.call('HMGET', k('prompts'), unpack(wanted))
    for j, ref in ipairs(wanted) do at[ref] = payloads[j] end
  end
  for i, ref in pairs(refs) do
    items[i] = string.sub(bodies[i], 1, -2) .. ',"payload":' .. (at[ref] or '{}') .. '}'
  end
  return items
end

-- Lease popped items to worker w with consecutive fresh fencing tokens; appended to out as
-- 5-tuples (key, token, deadline, attempt, item_json).
local function lease_all(keys, w, now, cfg, out)
  local last = redis.call('HINCRBY', META, 'fence', #keys)
  local items = item_jsons(keys)
  for i, key in ipairs(keys) do
    local r = get(key)
    r.s, r.w, r.tok, r.att, r.dl = 'r', w, int(last - #keys + i), r.att + 1, now + cfg.ttl
    dirty[key] = true
    count('r', w, 1)
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = key, tonumber(r.tok), r.dl, r.att, items[i]
  end
end

-- Re-sent claims and steals. A client re-sends a call whose reply it never got (redis-py after a
-- timeout, e.g. behind a large publish; a sidecar after an outage), and the script has usually run
-- the first time: running it again would lease more items, which the worker never hears of, each
-- lapsing after its lease TTL at the cost of an attempt (the longest items, as queues run longest
-- first). So each claim or steal names a call id, unique per call, and P:calls keeps, per worker
-- and kind, its last claim and its last steal that leased anything, under 'claim <w>' and
-- 'steal <w>': '<id>\n<victim>\n<token> <key>\n...' (keys hold no line break). The same id again
-- answers those leases the worker still holds, and leases nothing new. One field per kind, as the
-- sidecar keeps one unanswered id per kind: after a lost steal reply its next round CLAIMS first
-- (under affinity, the rest of the stolen group off its own queue), and a shared field would have
-- let that claim overwrite the steal's record, so the re-sent steal stole afresh.
local function remember_call(w, kind, call, victim, out, first, cfg)
  if call == nil or call == '' or #out < first then return end
  local lines = {call, victim}
  for i = first, #out, 5 do lines[#lines + 1] = get(out[i]).tok .. ' ' .. out[i] end
  redis.call('HSET', k('calls'), kind .. ' ' .. w, table.concat(lines, '\n'))
  keep(k('calls'), cfg.exp)
end

-- The answer of the call id call already ran for worker w, as 5-tuples (those of its leases still
-- current, same tokens), and its victim ('' for a claim); nil when call is not w's last call of
-- that kind ('claim' or 'steal').
local function replayed_call(w, kind, call)
  if call == nil or call == '' then return nil end
  local v = redis.call('HGET', k('calls'), kind .. ' ' .. w)
  local lines = {}
  for line in string.gmatch((v or '') .. '\n', '([^\n]*)\n') do lines[#lines + 1] = line end
  if lines[1] ~= call then return nil end
  local keys = {}
  for i = 3, #lines do
    local tok, key = string.match(lines[i], '^(%d+) (.*)$')
    local r = tok and get(key)
    if r and r.s == 'r' and r.w == w and r.tok == tok then keys[#keys + 1] = key end
  end
  local out = {}
  local items = #keys > 0 and item_jsons(keys) or {}
  for i, key in ipairs(keys) do
    local r, n = get(key), #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = key, tonumber(r.tok), r.dl, r.att, items[i]
  end
  return out, lines[2]
end

-- Prefix affinity: items of one group, just taken off their queue (dequeued), join worker w so the
-- group runs on one engine's prefix cache: the first n are leased now (appended to out), the rest
-- go to w's own queue in order. Callers run it only while w's own queue is empty (claim drains it
-- first, steal requires it), so the rest is its head and runs next, as the simulator's enqueue onto
-- an empty queue (scheduler/sim_pool.py, _claim_into / _steal_group).
local function adopt(keys, w, n, now, cfg, out)
  local leased, rest = {}, {}
  for i, key in ipairs(keys) do
    if i <= n then leased[#leased + 1] = key else rest[#rest + 1] = key end
  end
  for _, key in ipairs(rest) do
    local r = get(key)
    r.w = w
    dirty[key] = true
    work_delta(w, tonumber(r.pred))
  end
  if #rest > 0 then
    bulk('RPUSH', k('q:' .. w), rest)
    keep(k('q:' .. w), cfg.exp)
    index_push(cfg, w, rest, 'RPUSH')
    count('q', w, #rest)
  end
  if #leased > 0 then lease_all(leased, w, now, cfg, out) end
end

-- KV tokens worker w's cache holds (P:cap, from the publisher's inventory); nil (no limit to check)
-- when w's capacity is unknown, or when no item needs checking at all (no P:need: every published
-- cache holds every item), so such schedules pay one EXISTS per call.
local function capacity(w)
  if redis.call('EXISTS', k('need')) == 0 then return nil end
  return tonumber(redis.call('HGET', k('cap'), w) or '')
end

-- How many of keys, from the first, a cache of cap tokens holds at their caps (P:need: prompt +
-- max_new_tokens of each item some published cache cannot hold; absent: every cache holds it), as
-- the simulator's can_hold. An engine refuses a request past its context, so no claim or steal
-- hands a worker one it cannot hold. All of them when cap is nil.
local function holdable(keys, cap)
  if not cap then return #keys end
  for i = 1, #keys, 1000 do
    local needs = redis.call('HMGET', k('need'), unpack(keys, i, math.min(i + 999, #keys)))
    for j, need in ipairs(needs) do
      if need and tonumber(need) > cap then return i + j - 2 end
    end
  end
  return #keys
end

-- Items just popped from queue q: take them off q's steal score and queued counters.
local function dequeued(q, keys)
  for _, key in ipairs(keys) do work_delta(q, -tonumber(get(key).pred)) end
  count('q', q, -#keys)
end

-- Put a running item back at the HEAD of a queue (next to start): its holder's, or to's (a failed
-- item's next attempt, release.lua); the item then belongs to that queue.
local function requeue(key, cfg, to)
  local r = get(key)
  local holder = r.w
  to = to or holder
  r.s, r.w = 'q', to
  dirty[key] = true
  redis.call('LPUSH', k('q:' .. to), key)
  keep(k('q:' .. to), cfg.exp)
  index_push(cfg, to, {key}, 'LPUSH')
  work_delta(to, tonumber(r.pred))
  count('r', holder, -1)
  count('q', to, 1)
end

-- Worker w showed life in this schedule (a claim, a steal or a heartbeat): P:seen keeps when, at
-- most every quarter lease TTL (an idle worker claims every poll; one write per poll would be a
-- write per idle poll per worker). A failed item's next attempt goes only to a worker seen within a TTL, the
-- reaper's horizon of death: an empty queue alone would make a dead or stopped worker look the
-- least loaded of all.
local function mark_seen(w, now, cfg)
  if w == nil or w == '' then return end
  local last = tonumber(redis.call('ZSCORE', k('seen'), w) or '')
  if last and last <= now and now - last < cfg.ttl / 4 then return end
  redis.call('ZADD', k('seen'), now, w)
  keep(k('seen'), cfg.exp)
end

-- Move a running item to the dead-letter list, with why and how often it was tried.
local function bury(key, now, reason, cfg)
  local r = get(key)
  r.s = 'x'
  dirty[key] = true
  redis.call('RPUSH', k('dead'), cjson.encode({key = key, worker = r.w, attempts = r.att,
    reason = reason, at_ms = now}))
  keep(k('dead'), cfg.exp)
  count('r', r.w, -1)
  count('f', r.w, 1)
end

-- A lease whose deadline passed: requeue it, or dead-letter it once max_attempts are spent.
local function expire(key, now, cfg)
  local r = get(key)
  if r.att >= cfg.max_attempts then
    local noun = r.att == 1 and ' attempt' or ' attempts'
    bury(key, now, 'lease expired after ' .. r.att .. noun, cfg)
    return 'dead'
  end
  requeue(key, cfg)
  return 'requeued'
end

-- A current lease whose process died running it (a restarted sidecar's reset, reset.lua; a restarted
-- pull worker's /reset or a crashed engine, release.lua mode 'died'), handed back to the head of its holder's queue. Its
-- attempt is refunded the first `refunds` times its item comes back so (P:handback counts them, per
-- item: a death for an unrelated cause costs nothing), then spent, and on the last the item is
-- dead-lettered saying why: an item whose run kills its process came back refunded after every
-- restart and never ran out of attempts. who names the process for the dead letter. Returns
-- 'released' (refunded), 'charged' (requeued, attempt spent) or 'dead'.
local function hand_back(key, now, refunds, who, cfg)
  local r = get(key)
  local n = redis.call('HINCRBY', k('handback'), key, 1)
  keep(k('handback'), cfg.exp)
  if n <= refunds then
    r.att = r.att - 1
    requeue(key, cfg)
    return 'released'
  end
  if r.att >= cfg.max_attempts then
    local noun = r.att == 1 and ' attempt' or ' attempts'
    bury(key, now, who .. ' died holding it ' .. n .. ' times (handed back at each restart), after '
      .. r.att .. noun, cfg)
    return 'dead'
  end
  requeue(key, cfg)
  return 'charged'
end

-- 1 once every item is done, dead or cancelled: the caller (Python) then drops the schedule from
-- the indexes. Every script that can settle an item's fate appends it to its reply.
local function settled_flag(cfg)
  local c = redis.call('HMGET', k('counts'), 'd', 'f', 'c')
  return ((tonumber(c[1]) or 0) + (tonumber(c[2]) or 0) + (tonumber(c[3]) or 0) >= cfg.total) and 1 or 0
end

-- The lease (key, token) right now, as holder ('' or nil = any) sees it: 'current', 'expired' (token
-- current but past its deadline; the caller must expire it), or 'stale' (reaped, released, done,
-- superseded, never issued, or held by another worker: tokens count up per schedule, so a token alone
-- is easy to guess, and a worker must not extend, release or fail another's items).
local function lease_status(key, token, now, holder)
  local r = get(key)
  if r == nil or r.s ~= 'r' or r.tok ~= token then return 'stale' end
  if holder ~= nil and holder ~= '' and r.w ~= holder then return 'stale' end
  if r.dl < now then return 'expired' end
  return 'current'
end

-- Redis outages (docs/delivery.md, "Redis outages"). Deadlines are judged on Redis's clock, which
-- runs on while Redis is down, SIGSTOPped or replaying its AOF, or while no one can reach it, and
-- the holders' heartbeats cannot land meanwhile: an outage past two thirds of the TTL had ended
-- every running lease and spent an attempt of each (a dead letter on the last attempt). So every
-- script that can judge a lease (claim, steal, heartbeat, complete, release, reap, reset) calls
-- pulse first. META 'pulse' is when a script last ran on this schedule (server TIME, rewritten at
-- most every sixteenth of the TTL); live holders heartbeat every third of it and reapers visit a
-- schedule with running leases every third of it (reap.lua), so a silence past half the TTL means
-- no one reached the schedule: an outage. Each running lease whose deadline had not passed when
-- the silence began then gets a deadline of now + ttl, as if its holder had heartbeated as Redis
-- came back; a holder that died before or during the outage stays silent and its lease lapses one
-- TTL later. P:graced keeps the token of each lease so graced until its holder heartbeats again
-- (heartbeat.lua clears it), and a lease is graced once per such silence of its holder: however
-- often silences recur (a slow reaper, the service down too), a dead holder's lease lapses. An
-- explicit clock (tests, simulations) jumps at will: only the server's TIME is judged.
local function pulse(cfg, arg)
  if arg ~= nil and arg ~= '' then return 0 end
  local now, last = now_ms(''), cfg.pulse
  local st, zadd, marks = {}, {}, {}
  if last and now - last > cfg.ttl / 2 then
    local keys = redis.call('ZRANGEBYSCORE', k('deadlines'), last, '(' .. int(now + cfg.ttl))
    -- in chunks: every running lease of a large schedule is past what one unpack takes (~8,000),
    -- and an error here, before the pulse is rewritten, failed every later script of the schedule
    local done = {}
    for i = 1, #keys, 1000 do
      local marks = redis.call('HMGET', k('graced'), unpack(keys, i, math.min(i + 999, #keys)))
      for j, mark in ipairs(marks) do done[i + j - 1] = mark end
    end
    for i, key in ipairs(keys) do
      local r = get(key)
      if r.s == 'r' and done[i] ~= r.tok then
        r.dl = now + cfg.ttl  -- written here, not by flush: a script may return before it flushes
        st[#st + 1], st[#st + 2] = key, r.s .. '|' .. r.tok .. '|' .. r.att .. '|' .. int(r.dl) .. '|' .. r.pred
          .. '|' .. r.w .. '|' .. r.res
        zadd[#zadd + 1], zadd[#zadd + 2] = int(r.dl), key
        marks[#marks + 1], marks[#marks + 2] = key, r.tok
      end
    end
  end
  if #st > 0 then
    bulk('HSET', k('st'), st)
    bulk('ZADD', k('deadlines'), zadd)
    bulk('HSET', k('graced'), marks)
    keep(k('graced'), cfg.exp)
    redis.call('HINCRBY', META, 'graced', #marks / 2)
    cfg.graced = true  -- a heartbeat in this very script clears its holder's marks: it spoke
  end
  if not last or now < last or now - last >= cfg.ttl / 16 then
    redis.call('HSET', META, 'pulse', int(now))
  end
  return #marks / 2
end
