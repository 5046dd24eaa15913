-- claim: lease up to max items from the head of the worker's own queue, then from the shared FIFO.
-- ARGV: worker, max, now ('' = server).
-- Returns a flat list of 5-tuples (key, token, deadline_ms, attempt, item_json); error NOSCHEDULE.
local cfg = settings()
if not cfg then return redis.error_reply('NOSCHEDULE') end
local w, want, now = ARGV[1], tonumber(ARGV[2]), now_ms(ARGV[3])
local out = {}
for _, q in ipairs({w, '*'}) do
  local need = want - #out / 5
  if need <= 0 then break end
  local keys = redis.call('LPOP', k('q:' .. q), need)
  if keys then
    dequeued(q, keys)
    lease_all(keys, w, now, cfg, out)
  end
end
flush(cfg)
return out
