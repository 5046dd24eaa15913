-- planning: mark or unmark one POST /schedule in flight under the id (P:planning, an entry per
-- request: nonce -> 'accepted_ms:deadline_ms', server time unless pinned). The key lives until its
-- latest entry's deadline: a mark extends the key's TTL to its own (never shortens it: a request
-- racing this one keeps its own), and an unmark sets it from the entries left, so a request refused
-- or failed gives the key no later expiry than the others gave it. The entry of an older replica (a
-- bare accepted_ms, no deadline of its own) leaves the TTL as it is; entries whose deadline passed
-- lapse with the key. An unmark of an entry not there (published, withdrawn, lapsed) writes nothing.
-- ARGV: op ('mark' or 'unmark'), nonce, ttl_ms (mark), now ('' = server). Returns 1, or 0 when
-- the unmark found no entry.
local key = k('planning')
local now = now_ms(ARGV[4])
if ARGV[1] == 'mark' then
  local ttl = tonumber(ARGV[3])
  redis.call('HSET', key, ARGV[2], int(now) .. ':' .. int(now + ttl))
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  return 1
end
if redis.call('HDEL', key, ARGV[2]) == 0 then return 0 end
local latest = 0
for _, entry in ipairs(redis.call('HVALS', key)) do
  local deadline = tonumber(string.match(entry, ':(%d+)$'))
  if not deadline then return 1 end
  latest = math.max(latest, deadline)
end
if latest > now then
  redis.call('PEXPIRE', key, latest - now)
else
  redis.call('DEL', key)
end
return 1
