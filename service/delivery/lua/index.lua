-- Steal indexes, prepended after common.lua (scripts.py). A steal reads a victim's tail through a list
-- of only the items this thief may take, where one exists, so no run of items it may never take
-- (pinned ones; ones too big for its KV cache) shields the items before them, and passing over them
-- costs nothing (a hundred pinned items planned last, or a hundred long documents with short
-- answers, used to keep every item before them from thieves: steal.lua looked SCAN items from the
-- tail). Each list holds its items in queue order, so what a claim pops from a queue's head heads
-- the list too, and a requeue to the head goes to the head of the list:
--   P:u:<w>        the unpinned items of w's queue, for a queue that held pins at publish (meta
--                  'pinq', a JSON list of workers: pinned items only ever return to their own
--                  worker's queue, so no other queue needs one);
--   P:h:<cap>:<w>  the unpinned items of w's queue that a cache of cap tokens holds (P:need), for
--                  every queue, for each cap of P:cap below some P:need (meta 'holds', a JSON list);
--                  under prefix affinity, where a steal moves whole groups, the unpinned items whose
--                  whole group it holds (P:gneed, the largest P:need of the item's group), so a group
--                  with one member too big for the thief shields nothing, as a pinned one does not.
-- Every script that moves an item in or out of a queue moves it in or out of that queue's lists
-- (claim, requeue, adopt, steal, cancel); a schedule without pins or small caches has none of them
-- and reads nothing more for them (both fields come with settings()).

-- The lists of worker w's queue: {key, cap}, cap nil for P:u (every unpinned item).
local function index_lists(cfg, w)
  if w == '*' or not (cfg.pinq or cfg.holds) then return {} end
  if not cfg.lists then
    cfg.lists, cfg.pinned_queues = {}, {}
    for _, q in ipairs(cfg.pinq and cjson.decode(cfg.pinq) or {}) do cfg.pinned_queues[q] = true end
    cfg.caps = cfg.holds and cjson.decode(cfg.holds) or {}
  end
  local lists = cfg.lists[w]
  if not lists then
    lists = {}
    if cfg.pinned_queues[w] then lists[1] = {key = k('u:' .. w)} end
    for _, c in ipairs(cfg.caps) do lists[#lists + 1] = {key = k('h:' .. int(c) .. ':' .. w), cap = c} end
    cfg.lists[w] = lists
  end
  return lists
end

-- The list of victim w's queue a thief with KV capacity cap reads its tail from (nil: the queue
-- itself), and whether that list holds only items the thief can hold (no P:need check needed;
-- under prefix affinity: only items of groups it holds whole).
local function steal_list(cfg, w, cap)
  local unpinned = nil
  for _, list in ipairs(index_lists(cfg, w)) do
    if not list.cap then unpinned = list.key
    elseif cap and list.cap == cap then return list.key, true end
  end
  return unpinned, false
end

-- For each of worker w's lists, which of keys belong in it (unpinned, and held at its cap).
local function index_members(cfg, w, keys)
  local lists = index_lists(cfg, w)
  if #lists == 0 or #keys == 0 then return lists, {} end
  local pins = cfg.pinq and redis.call('HMGET', k('pin'), unpack(keys)) or {}  -- no pins: no P:u
  local needs = cfg.holds and redis.call('HMGET', k(cfg.affinity and 'gneed' or 'need'), unpack(keys)) or {}
  local members = {}
  for i, list in ipairs(lists) do
    members[i] = {}
    for j, key in ipairs(keys) do
      if not pins[j] and not (list.cap and needs[j] and tonumber(needs[j]) > list.cap) then
        members[i][#members[i] + 1] = key
      end
    end
  end
  return lists, members
end

-- keys joined worker w's queue: at its tail (cmd 'RPUSH', in order) or, one key, at its head ('LPUSH').
index_push = function(cfg, w, keys, cmd)
  local lists, members = index_members(cfg, w, keys)
  for i, list in ipairs(lists) do
    if #members[i] > 0 then
      bulk(cmd, list.key, members[i])
      keep(list.key, cfg.exp)
    end
  end
end

-- keys left the head of worker w's queue (a claim): as many leave the head of each list.
index_pop = function(cfg, w, keys)
  local lists, members = index_members(cfg, w, keys)
  for i, list in ipairs(lists) do
    if #members[i] > 0 then redis.call('LPOP', list.key, #members[i]) end
  end
end

-- keys left worker w's queue near its tail (a steal): each leaves the lists that hold it (an LREM
-- only where it is: one for an absent key would read the whole list).
index_drop = function(cfg, w, keys)
  local lists, members = index_members(cfg, w, keys)
  for i, list in ipairs(lists) do
    for _, key in ipairs(members[i]) do redis.call('LREM', list.key, -1, key) end
  end
end

-- Every list of worker w's queue (a cancel).
local function index_keys(cfg, w)
  local out = {}
  for _, list in ipairs(index_lists(cfg, w)) do out[#out + 1] = list.key end
  return out
end
