-- complete: accept a result only with the item's current, unexpired token; append it to the results
-- stream exactly once. A repeat with the accepted token is an idempotent success (its result ignored);
-- any other token is stale and its result discarded.
-- ARGV: now ('' = server), holder ('' = any: the lease's token alone), then triples (key, token,
-- result_json). With a holder, a lease held by another worker is stale too: lease tokens count up per
-- schedule, so a token alone is easy to guess, and a worker must not report another's items.
-- Returns {code per item (1 accepted, 2 duplicate, 0 stale)..., finished (1 when every item is done,
-- dead or cancelled)}. An accepted item's record keeps, where its lease's deadline was, the
-- millisecond of its result's stream id (no later: the lease was current): a reader after one result
-- (service/learning/step_over.py) reads that millisecond, not the stream down to it.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now = now_ms(ARGV[1])
pulse(cfg, ARGV[1])  -- first: an outage's grace before any lease is judged (common.lua)
local holder = ARGV[2] or ''
local out = {}
local accepted = false
for i = 3, #ARGV, 3 do
  local key, token = ARGV[i], ARGV[i + 1]
  local r = get(key)
  local code = 0
  local theirs = r ~= nil and holder ~= '' and r.w ~= holder
  if r ~= nil and r.s == 'd' then
    if r.tok == token and not theirs then code = 2 end
  elseif not theirs then
    local status = lease_status(key, token, now)
    if status == 'current' then
      r.s = 'd'
      dirty[key] = true
      local id = redis.call('XADD', k('results'), '*', 'key', key, 'worker', r.w, 'token', token,
        'attempt', r.att, 'result', ARGV[i + 2])
      r.dl = tonumber(string.match(id, '^(%d+)'))
      count('r', r.w, -1)
      count('d', r.w, 1)
      accepted = true
      code = 1
    elseif status == 'expired' then
      expire(key, now, cfg)
    end
  end
  out[#out + 1] = code
end
if accepted then keep(k('results'), cfg.exp) end
flush(cfg)
out[#out + 1] = settled_flag(cfg)
return out
