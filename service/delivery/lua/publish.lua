-- publish: write a whole schedule atomically; a replay with the same fingerprint changes nothing.
-- ARGV: fingerprint, now ('' = server), retention_ms, lease_ttl_ms, max_attempts, kv_admission,
--       workers_json, n, then n x (worker, key, predicted_tokens, item_json).
-- Returns 1 created, 0 unchanged replay; error CONFLICT when the id holds a different schedule.
local existing = redis.call('HGET', META, 'fingerprint')
if existing then
  if existing == ARGV[1] then return 0 end
  return redis.error_reply('CONFLICT schedule id already holds a different schedule')
end
local now = now_ms(ARGV[2])
-- Retention is wall-clock: always the server's TIME, even when the lease clock is pinned.
local exp = now_ms('') + tonumber(ARGV[3])
local n = tonumber(ARGV[8])
redis.call('HSET', META, 'fingerprint', ARGV[1], 'total', n, 'lease_ttl_ms', ARGV[4],
  'max_attempts', ARGV[5], 'kv_admission', ARGV[6], 'workers', ARGV[7], 'published_ms', now,
  'expire_at_ms', exp, 'fence', 0)
for _, w in ipairs(cjson.decode(ARGV[7])) do
  for _, s in ipairs({'q', 'r', 'd', 'f'}) do redis.call('HSET', k('counts'), s .. ':' .. w, 0) end
end
redis.call('HSET', k('counts'), 'q', n, 'r', 0, 'd', 0, 'f', 0)
local queues = {}
local i = 9
for _ = 1, n do
  local w, key, pred, js = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  redis.call('RPUSH', k('q:' .. w), key)
  redis.call('HSET', k('items'), key, js)
  redis.call('HSET', k('pred'), key, pred)
  redis.call('HSET', k('state'), key, 'q')
  redis.call('HSET', k('where'), key, w)
  redis.call('HINCRBY', k('counts'), 'q:' .. w, 1)
  if w ~= '*' then redis.call('ZINCRBY', k('work'), pred, w) end
  queues[w] = true
end
for w, _ in pairs(queues) do redis.call('PEXPIREAT', k('q:' .. w), exp) end
for _, s in ipairs({'meta', 'items', 'pred', 'state', 'where', 'counts', 'work'}) do
  redis.call('PEXPIREAT', k(s), exp)
end
return 1
