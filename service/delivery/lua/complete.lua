-- complete: accept a result only with the item's current, unexpired token; append it to the results
-- stream exactly once. A repeat with the accepted token is an idempotent success (its result ignored);
-- any other token is stale and its result discarded.
-- ARGV: now ('' = server), then triples (key, token, result_json).
-- Returns {code per item (1 accepted, 2 duplicate, 0 stale)..., finished (1 when every item is done
-- or dead)}.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now = now_ms(ARGV[1])
local out = {}
local accepted = false
for i = 2, #ARGV, 3 do
  local key, token = ARGV[i], ARGV[i + 1]
  local done_token = redis.call('HGET', k('done'), key)
  local code = 0
  if done_token then
    if done_token == token then code = 2 end
  else
    local status = lease_status(key, token, now)
    if status == 'current' then
      local holder = redis.call('HGET', k('where'), key)
      redis.call('HSET', k('state'), key, 'd')
      redis.call('HSET', k('done'), key, token)
      redis.call('ZREM', k('deadlines'), key)
      redis.call('XADD', k('results'), '*', 'key', key, 'worker', holder, 'token', token,
        'attempt', redis.call('HGET', k('att'), key), 'result', ARGV[i + 2])
      count('r', holder, -1)
      count('d', holder, 1)
      accepted = true
      code = 1
    elseif status == 'expired' then
      expire(key, now, cfg)
    end
  end
  out[#out + 1] = code
end
if accepted then
  keep(k('done'), cfg.exp)
  keep(k('results'), cfg.exp)
end
out[#out + 1] = finished() and 1 or 0
return out
