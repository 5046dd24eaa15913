-- heartbeat: extend each lease to now+ttl while its token is current and its deadline not passed.
-- A lease found past its deadline is expired on the spot (requeued or dead-lettered), exactly as the
-- reaper would, so expiry depends on time alone, never on when a reaper happened to run.
-- ARGV: now ('' = server), holder ('' = any: the token alone), then pairs (key, token). A lease
-- held by another worker is gone for this one (as in complete.lua).
-- Returns one integer per lease: the new deadline (ms), or -1 when the lease is gone; then the settled
-- flag (1 when every item is done, dead or cancelled).
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local now = now_ms(ARGV[1])
pulse(cfg, ARGV[1])  -- first: an outage's grace before any lease is judged (common.lua)
local holder = ARGV[2]
mark_seen(holder, now, cfg)
local out, alive = {}, {}
for i = 3, #ARGV, 2 do
  local key = ARGV[i]
  local status = lease_status(key, ARGV[i + 1], now, holder)
  if status == 'current' then
    get(key).dl = now + cfg.ttl
    dirty[key] = true
    out[#out + 1] = now + cfg.ttl
    alive[#alive + 1] = key
  else
    if status == 'expired' then expire(key, now, cfg) end
    out[#out + 1] = -1
  end
end
-- the holder spoke: an outage after this one graces these leases again (common.lua, pulse); no
-- command at all on a schedule no outage ever graced
if cfg.graced and #alive > 0 then bulk('HDEL', k('graced'), alive) end
flush(cfg)
out[#out + 1] = settled_flag(cfg)
return out
