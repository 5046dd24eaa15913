-- Shared preamble of every delivery script (scripts.py prepends it to each operation).
-- KEYS[1] is the schedule's meta key '<prefix>:{<sid>}:meta'; every other key is derived from it and
-- carries the same {sid} hash tag, so all of them are in KEYS[1]'s hash slot (Redis Cluster safe).
-- Item states: q queued, r running (leased), d done, x dead-lettered.
local META = KEYS[1]
local B = string.sub(META, 1, -6)
local function k(s) return B .. ':' .. s end

-- Milliseconds: the caller's explicit clock when given (tests, simulations), else the server's TIME,
-- so workers with skewed clocks still agree on every deadline.
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Re-apply the schedule's absolute expiry to a key this script may have (re)created.
local function keep(key, exp)
  if redis.call('PTTL', key) == -1 then redis.call('PEXPIREAT', key, exp) end
end

local function count(state, worker, delta)
  redis.call('HINCRBY', k('counts'), state, delta)
  redis.call('HINCRBY', k('counts'), state .. ':' .. worker, delta)
end

-- Settings every mutating script needs; nil when the schedule is unknown or expired.
local function settings()
  local m = redis.call('HMGET', META, 'lease_ttl_ms', 'max_attempts', 'expire_at_ms')
  if not m[1] then return nil end
  return {ttl = tonumber(m[1]), max_attempts = tonumber(m[2]), exp = tonumber(m[3])}
end

-- Lease one item to worker w: new fencing token, attempt+1, deadline now+ttl; appended to out.
local function lease(key, w, now, cfg, out)
  local token = redis.call('HINCRBY', META, 'fence', 1)
  local attempt = redis.call('HINCRBY', k('att'), key, 1)
  local deadline = now + cfg.ttl
  redis.call('HSET', k('state'), key, 'r')
  redis.call('HSET', k('where'), key, w)
  redis.call('HSET', k('tok'), key, token)
  redis.call('ZADD', k('deadlines'), deadline, key)
  count('r', w, 1)
  local n = #out
  out[n + 1] = key
  out[n + 2] = token
  out[n + 3] = deadline
  out[n + 4] = attempt
  out[n + 5] = redis.call('HGET', k('items'), key)
end

-- Items popped from queue w: take their predicted work off w's steal score and the queued counters.
local function dequeued(w, keys)
  local sum = 0
  for _, key in ipairs(keys) do sum = sum + tonumber(redis.call('HGET', k('pred'), key)) end
  count('q', w, -#keys)
  if w == '*' then return end
  if redis.call('LLEN', k('q:' .. w)) == 0 then
    redis.call('ZREM', k('work'), w)
  else
    redis.call('ZINCRBY', k('work'), -sum, w)
  end
end

-- Put a running item back at the HEAD of its holder's queue (next to start).
local function requeue(key, cfg)
  local w = redis.call('HGET', k('where'), key)
  redis.call('HSET', k('state'), key, 'q')
  redis.call('ZREM', k('deadlines'), key)
  redis.call('LPUSH', k('q:' .. w), key)
  redis.call('ZINCRBY', k('work'), tonumber(redis.call('HGET', k('pred'), key)), w)
  count('r', w, -1)
  count('q', w, 1)
  keep(k('q:' .. w), cfg.exp)
  keep(k('work'), cfg.exp)
end

-- Move a running item to the dead-letter list, with why and how often it was tried.
local function bury(key, now, reason, cfg)
  local w = redis.call('HGET', k('where'), key)
  local attempts = tonumber(redis.call('HGET', k('att'), key) or '0')
  redis.call('HSET', k('state'), key, 'x')
  redis.call('ZREM', k('deadlines'), key)
  redis.call('RPUSH', k('dead'), cjson.encode({key = key, worker = w, attempts = attempts,
    reason = reason, at_ms = now}))
  count('r', w, -1)
  count('f', w, 1)
  keep(k('dead'), cfg.exp)
end

-- A lease whose deadline passed: requeue it, or dead-letter it once max_attempts are spent.
-- Returns 'requeued' or 'dead'.
local function expire(key, now, cfg)
  local attempts = tonumber(redis.call('HGET', k('att'), key) or '0')
  if attempts >= cfg.max_attempts then
    bury(key, now, 'lease expired after ' .. attempts .. ' attempts', cfg)
    return 'dead'
  end
  requeue(key, cfg)
  return 'requeued'
end

-- The lease (key, token) as held right now: 'current', 'expired' (token current but past its
-- deadline; the caller must expire it), or 'stale' (reaped, stolen back, done, or never issued).
local function lease_status(key, token, now)
  if redis.call('HGET', k('state'), key) ~= 'r' then return 'stale' end
  if redis.call('HGET', k('tok'), key) ~= token then return 'stale' end
  local deadline = tonumber(redis.call('ZSCORE', k('deadlines'), key))
  if deadline < now then return 'expired' end
  return 'current'
end

local function finished()
  local c = redis.call('HMGET', k('counts'), 'd', 'f')
  local total = tonumber(redis.call('HGET', META, 'total'))
  return (tonumber(c[1] or '0') + tonumber(c[2] or '0')) >= total
end
