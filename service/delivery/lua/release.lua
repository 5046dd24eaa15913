-- release: hand leases back. mode 'release' (graceful shutdown): requeue at the head of the holder's
-- queue in the original order and refund the attempt. mode 'fail' (the engine failed the item): the
-- attempt counts; requeue, or dead-letter once max_attempts are spent.
-- ARGV: mode, now ('' = server), reason, holder ('' = any: the token alone), then pairs (key,
-- token). A lease held by another worker is stale (as in complete.lua): nothing changes.
-- Returns one code per lease: 1 requeued, 3 dead-lettered, 0 stale (not held: nothing changed); then
-- the settled flag (1 when every item is done, dead or cancelled).
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local mode, now, reason, holder = ARGV[1], now_ms(ARGV[2]), ARGV[3], ARGV[4]
local out = {}
-- Walk backwards so that LPUSH leaves the first lease at the head of the queue.
for i = #ARGV - 1, 5, -2 do
  local key = ARGV[i]
  local status = lease_status(key, ARGV[i + 1], now, holder)
  local code = 0
  if status == 'current' then
    local r = get(key)
    if mode == 'release' then
      r.att = r.att - 1
      requeue(key, cfg)
      code = 1
    elseif r.att >= cfg.max_attempts then
      bury(key, now, reason, cfg)
      code = 3
    else
      requeue(key, cfg)
      code = 1
    end
  elseif status == 'expired' then
    expire(key, now, cfg)
  end
  table.insert(out, 1, code)
end
flush(cfg)
out[#out + 1] = settled_flag(cfg)
return out
