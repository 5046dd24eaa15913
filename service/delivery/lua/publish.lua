-- publish: write a whole schedule atomically; a replay with the same fingerprint changes nothing.
-- ARGV: fingerprint, now ('' = server), retention_ms, lease_ttl_ms, max_attempts, kv_admission,
--       workers_json (announced workers: the drained ones are in 24), queues_json (queue names in item order, '*' = shared
--       FIFO), sizes_json (items per queue), paces_json (worker -> seconds per predicted token as a
--       string; '*' = the default), then (wire.publish_args; every column in item order, one string
--       each: a few large arguments parse far faster than thousands of small ones)
--   11 newline-joined keys,
--   12 newline-joined P:st records ('q|0|0|0|<predicted>|<queue>|<reserve>', stored as they come),
--   13 scores_json (per queue, its predicted tokens summed in item order, as a string: P:work),
--   14 newline-joined item JSONs, then the steal rules:
--   15 affinity ('1' = prefix affinity),
--   16 newline-joined keys of the pinned items ('' for none),
--   17 newline-joined groups, one per item ('' without affinity),
--   18 steal deadlines, per item 'start' and 'end' on two lines (ms after publication), or one
--      line '-' for none,
--   19 newline-joined distinct payload JSONs (line i = ref i; wire.stored_items), then what a cache
--      must hold (wire.capacity_args):
--   20 caps_json (worker -> KV capacity, tokens),
--   21 'key\nneed' per item that some published cache cannot hold (prompt + max_new_tokens; '' none),
--      then what the plan predicts: 22 its makespan in seconds ('' unknown) and
--   23 planned_json (worker -> predicted finish, seconds after publication),
--   24 drained_json (the request's drained workers, '[]' for none: meta 'drained', common.lua),
--   25 the digest of the request's work ('' none: meta 'request'), 26 the service's answer to it
--      ('' none: P:answer), stored in this same step, so a stored schedule always has them
--      (service/pipeline/republish.py: a retry under the id is answered it),
--   27 the engine whose rules the plan was made for ('' none: meta 'engine', keys.ENGINE),
--   28 the nonce of the request's in-flight mark (P:planning, planning.lua; '' for none: a drawn id,
--      a bench, a caller without a mark), and last
--   29 a nonce unique to the call: the same call re-sent after a timeout answers 1 again.
-- Mixed releases: the call nonce is read as the last argument and the mark's only where there are
-- 29, so a release before the mark's (28 arguments, the call nonce last) publishes through this
-- script unchecked, and that release's script, sent these 29, takes the call nonce as it always did.
-- Python builds each stored string (records, pairs) so the script only splits and writes: per-item
-- work in Lua (concatenation, tonumber, string.match) cost more than the writes themselves.
-- An item's JSON arrives as '<ref>\t<JSON without payload>' and is stored so; its payload is stored
-- once in P:prompts under ref, since the samples of a prompt share it (lease_all puts it back).
-- Returns 1 created (also to the creating call re-sent), 0 unchanged replay; error CONFLICT when the
-- id holds a different schedule, or the same one published for other work (another step: the
-- request digests differ), which a replay would announce again for a request that is refused;
-- error WITHDRAWN (below); error UNMARKED when the mark named is not in P:planning (lapsed while
-- Redis failed its keeps, or only another request's there): a DELETE may have found the id free
-- (404) and the trainer given the step up, so nothing is written (service/pipeline/in_flight.py).
local nonce = ARGV[#ARGV]
local marked = #ARGV >= 29 and ARGV[28] or ''
local existing = redis.call('HGET', META, 'fingerprint')
if existing then
  local work = redis.call('HGET', META, 'request')
  if existing == ARGV[1] and (ARGV[25] == '' or not work or work == ARGV[25]) then
    return redis.call('HGET', META, 'nonce') == nonce and 1 or 0
  end
  return redis.error_reply('CONFLICT schedule id already holds a different schedule')
end
-- a DELETE met the id in flight before this publish (cancel.lua): the trainer gave the step up
if redis.call('EXISTS', k('withdrawn')) == 1 then
  return redis.error_reply('WITHDRAWN schedule id was cancelled before it was published')
end
-- after a replay, a conflict and a withdrawal, which answer as they did: each tells more
if marked ~= '' and redis.call('HEXISTS', k('planning'), marked) == 0 then
  return redis.error_reply('UNMARKED the request\'s in-flight mark lapsed before it was published')
end
local now = now_ms(ARGV[2])
-- Retention is wall-clock: always the server's TIME, even when the lease clock is pinned.
local wall = now_ms('')
local exp = wall + tonumber(ARGV[3])
-- Fencing tokens count up from this publish's epoch, the server's wall clock in ms times 1,000
-- (~1.8e15, exact in Lua's doubles and JSON's up to 2^53: year 2255), not from 0: a schedule id
-- published again once its keys expired starts past every token its earlier publish issued unless
-- that one leased over 1,000 items a millisecond, so a completion held past the retention (a pull
-- worker's /done) is stale, not accepted against the new lease of the same key and token.
local fence = int(wall * 1000)
local names, sizes = cjson.decode(ARGV[8]), cjson.decode(ARGV[9])
-- The non-empty lines of s; with keys, each line after the key of its item (keys[1], line 1,
-- keys[2], line 2, ...: an HSET's arguments, built in the one pass). gmatch takes a line per C call,
-- which wins on short lines (1,024 keys: 0.39 ms against 0.55 ms for find and sub) but tests every
-- character, so long ones (item JSONs, payloads) go through long_lines, where a plain find jumps
-- from newline to newline (1,024 JSONs of 260 characters: 0.57 ms against 2.4 ms).
local function lines(s, keys)
  local out, n = {}, 0
  if keys then
    for line in string.gmatch(s, '[^\n]+') do
      n = n + 1
      out[n + n - 1], out[n + n] = keys[n], line
    end
  else
    for line in string.gmatch(s, '[^\n]+') do
      n = n + 1
      out[n] = line
    end
  end
  return out
end
local function long_lines(s, keys)
  local out, n, at, size = {}, 0, 1, #s
  while at <= size do
    local stop = string.find(s, '\n', at, true) or size + 1
    if stop > at then
      n = n + 1
      if keys then
        out[n + n - 1], out[n + n] = keys[n], string.sub(s, at, stop - 1)
      else
        out[n] = string.sub(s, at, stop - 1)
      end
    end
    at = stop + 1
  end
  return out
end
local stated = cjson.decode(ARGV[10])
local keys = lines(ARGV[11])
local affinity, groups = ARGV[15], lines(ARGV[17])
local flat = {}
for w, p in pairs(stated) do flat[#flat + 1], flat[#flat + 2] = w, p end
bulk('HSET', k('pace'), flat)
local n = #keys
-- 'announcing' (the retention, s: the announce's mark, announcing.py) is set here, with the store, so a
-- process killed before its announce's opening script leaves it marked, and listed: the publish
-- listed it in the announcing index before this script (announcing.list_ahead, ops67).
redis.call('HSET', META, 'fingerprint', ARGV[1], 'total', n, 'lease_ttl_ms', ARGV[4],
  'max_attempts', ARGV[5], 'kv_admission', ARGV[6], 'workers', ARGV[7], 'published_ms', now,
  'expire_at_ms', exp, 'fence', fence, 'affinity', affinity, 'nonce', nonce,
  'announcing', string.format('%d', math.floor(tonumber(ARGV[3]) / 1000)))
-- The id holds a schedule from now on, so no request under it is in flight any more (a DELETE
-- cancels the schedule): the marks of this one and of any other racing it go in this same step.
-- Not before that HSET: Redis judges a script's memory at its first write, and a DEL (allowed out
-- of memory) first let a publish write its whole schedule past maxmemory.
redis.call('DEL', k('planning'))
-- What the plan predicts, for GET /schedule/{id} to compare with the time elapsed since 'published_ms'.
if ARGV[22] ~= '' then redis.call('HSET', META, 'makespan_s', ARGV[22]) end
if ARGV[23] ~= '{}' then redis.call('HSET', META, 'planned_finish', ARGV[23]) end
-- Drained workers take nothing (claim, steal, a failed item's retry); absent when none, so the
-- schedules without a drain read nothing more (settings() fetches the field with the others).
if ARGV[24] ~= '[]' then redis.call('HSET', META, 'drained', ARGV[24]) end
if ARGV[25] ~= '' then redis.call('HSET', META, 'request', ARGV[25]) end
if ARGV[26] ~= '' then redis.call('SET', k('answer'), ARGV[26]) end
if ARGV[27] ~= '' then redis.call('HSET', META, 'engine', ARGV[27]) end
local cnt = {'q', n, 'r', 0, 'd', 0, 'f', 0}
local counted = cjson.decode(ARGV[7])  -- a drained worker is not announced, but reported on (zeros)
for _, w in ipairs(cjson.decode(ARGV[24])) do counted[#counted + 1] = w end
for _, w in ipairs(counted) do
  for _, s in ipairs({'q', 'r', 'd', 'f'}) do cnt[#cnt + 1], cnt[#cnt + 2] = s .. ':' .. w, 0 end
end
-- Under prefix affinity the shared FIFO is laid out group by group: groups in the order of their
-- first item, each group's items in dispatch order. A claim takes a group's first item with the
-- rest of the group behind it (claim.lua), so this serves exactly what the dispatch order bound as
-- the simulator plays it (scheduler/sim_pool.py, _bind_group) while a bind stays O(group), never a
-- scan of the FIFO. The queue holds positions first .. last of the item columns.
local function grouped(first, last)
  local order, members = {}, {}
  for j = first, last do
    local g = groups[j]
    if not members[g] then members[g], order[#order + 1] = {}, g end
    members[g][#members[g] + 1] = keys[j]
  end
  local out = {}
  for _, g in ipairs(order) do
    for _, key in ipairs(members[g]) do out[#out + 1] = key end
  end
  return out
end

-- The steal indexes (index.lua): P:u:<w> for a worker queue holding pinned items (named in meta
-- 'pinq'), and P:h:<cap>:<w> for every worker queue and each cap of P:cap below some P:need (meta
-- 'holds'): the unpinned items of the queue, those a cache of cap holds; under prefix affinity those
-- whose whole group it holds (P:gneed: the largest P:need among the item's group), since a steal
-- moves whole groups. Only when there are pins or such caps: other schedules pay nothing.
local pinned_set, need_of, pinq, holds, gneed = {}, {}, {}, {}, {}
for _, key in ipairs(lines(ARGV[16])) do pinned_set[key] = true end
do
  local pairs_ = lines(ARGV[21])
  for i = 1, #pairs_, 2 do need_of[pairs_[i]] = tonumber(pairs_[i + 1]) end
  local most, seen = 0, {}
  for _, v in pairs(need_of) do most = math.max(most, v) end
  for _, c in pairs(cjson.decode(ARGV[20])) do
    c = tonumber(c)
    if c < most and not seen[c] then seen[c], holds[#holds + 1] = true, c end
  end
  table.sort(holds)
  if affinity == '1' and #holds > 0 then  -- each group's largest need, then every member's
    local of_group = {}
    for j = 1, n do
      local need = need_of[keys[j]]
      if need and need > (of_group[groups[j]] or 0) then of_group[groups[j]] = need end
    end
    for j = 1, n do
      local need = of_group[groups[j]]
      if need then gneed[keys[j]] = need end
    end
  end
end
-- What the steal indexes judge an item by: its own need, or under affinity its group's.
local index_need = affinity == '1' and gneed or need_of
local function index_queue(w, first, last)
  if w == '*' or (next(pinned_set) == nil and #holds == 0) then return end
  local free, pins = {}, 0
  for j = first, last do
    if pinned_set[keys[j]] then pins = pins + 1 else free[#free + 1] = keys[j] end
  end
  local lists = {}
  if pins > 0 then
    pinq[#pinq + 1] = w
    lists[k('u:' .. w)] = free
  end
  for _, c in ipairs(holds) do
    local held = {}
    for _, key in ipairs(free) do
      if not (index_need[key] and index_need[key] > c) then held[#held + 1] = key end
    end
    lists[k('h:' .. int(c) .. ':' .. w)] = held
  end
  for list, members in pairs(lists) do
    if #members > 0 then
      bulk('RPUSH', list, members)
      redis.call('PEXPIREAT', list, exp)
    end
  end
end

-- Each queue is a run of the key column: pushed straight from it, in chunks unpack accepts.
local scores, first = cjson.decode(ARGV[13]), 1
for q, w in ipairs(names) do
  local last = first + sizes[q] - 1
  if last >= first then
    local queue = k('q:' .. w)
    if w == '*' and affinity == '1' then
      bulk('RPUSH', queue, grouped(first, last))
    else
      for a = first, last, 4000 do redis.call('RPUSH', queue, unpack(keys, a, math.min(a + 3999, last))) end
    end
    redis.call('PEXPIREAT', queue, exp)
    index_queue(w, first, last)
    cnt[#cnt + 1], cnt[#cnt + 2] = 'q:' .. w, last - first + 1
    if w ~= '*' then redis.call('ZADD', k('work'), tonumber(scores[q]) * pace(w), w) end
  end
  first = last + 1
end
if #pinq > 0 then redis.call('HSET', META, 'pinq', cjson.encode(pinq)) end
if #holds > 0 then redis.call('HSET', META, 'holds', cjson.encode(holds)) end
bulk('HSET', k('items'), long_lines(ARGV[14], keys))
local prompts, shared = {}, long_lines(ARGV[19])
for ref, payload in ipairs(shared) do prompts[#prompts + 1], prompts[#prompts + 2] = ref, payload end
if #prompts > 0 then bulk('HSET', k('prompts'), prompts) end
bulk('HSET', k('st'), lines(ARGV[12], keys))
bulk('HSET', k('counts'), cnt)
-- Steal rules: P:pin holds the pinned items (never stolen); under affinity P:grp maps each item to
-- its group and P:gsize each group to its size (a steal moves a whole, wholly queued group); P:due
-- maps each item with a deadline to its planned 'start|end' on the lease clock (steal.lua's guard).
-- What a cache must hold (claim.lua, steal.lua; the simulator's can_hold): P:cap maps each worker
-- whose KV capacity the publisher knows to it, P:need each item that some such cache cannot hold to
-- its prompt + max_new_tokens.
local pinned, grp, gsize, sizes_of, due, cap = {}, {}, {}, {}, {}, {}
for _, key in ipairs(lines(ARGV[16])) do pinned[#pinned + 1], pinned[#pinned + 2] = key, '1' end
for w, c in pairs(cjson.decode(ARGV[20])) do cap[#cap + 1], cap[#cap + 2] = w, c end
local need = lines(ARGV[21])
if affinity == '1' then
  for j = 1, n do
    grp[#grp + 1], grp[#grp + 2] = keys[j], groups[j]
    sizes_of[groups[j]] = (sizes_of[groups[j]] or 0) + 1
  end
end
for g, c in pairs(sizes_of) do gsize[#gsize + 1], gsize[#gsize + 2] = g, c end
-- ARGV[18]: 'start' and 'end' lines of an item with a deadline, '-' of one without (strings add as
-- numbers in Lua: no tonumber, and one format per record).
local nextline, j = string.gmatch(ARGV[18], '[^\n]+'), 0
for s0 in nextline do
  j = j + 1
  if s0 ~= '-' then
    due[#due + 1], due[#due + 2] = keys[j], string.format('%d|%d', now + s0, now + nextline())
  end
end
if #pinned > 0 then bulk('HSET', k('pin'), pinned) end
if #grp > 0 then bulk('HSET', k('grp'), grp) end
if #gsize > 0 then bulk('HSET', k('gsize'), gsize) end
if #due > 0 then bulk('HSET', k('due'), due) end
if #cap > 0 then bulk('HSET', k('cap'), cap) end
if #need > 0 then bulk('HSET', k('need'), need) end
do
  local flat_gneed = {}
  for key, v in pairs(gneed) do flat_gneed[#flat_gneed + 1], flat_gneed[#flat_gneed + 2] = key, v end
  if #flat_gneed > 0 then bulk('HSET', k('gneed'), flat_gneed) end
end
for _, s in ipairs({'meta', 'items', 'prompts', 'st', 'counts', 'work', 'pace', 'pin', 'grp', 'gsize', 'due', 'cap', 'need', 'gneed', 'answer'}) do redis.call('PEXPIREAT', k(s), exp) end
-- Free the big argument strings and tables now: left to the incremental collector they would slow
-- the next few hundred claims by tens of microseconds each.
keys, groups, prompts, shared, cnt, pinned, grp, gsize, sizes_of, due, need, pinned_set, need_of = nil, nil, nil, nil, nil,
  nil, nil, nil, nil, nil, nil, nil, nil
gneed, index_need = nil, nil
pcall(function() for a = #ARGV, 1, -1 do ARGV[a] = nil end end)  -- a server may protect ARGV
collectgarbage()
return 1
