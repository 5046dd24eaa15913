-- planning: mark, extend, keep or unmark one POST /schedule in flight under the id (P:planning, an
-- entry per request: nonce -> 'accepted_ms:deadline_ms', server time unless pinned). The key lives until its
-- latest entry's deadline: a mark extends the key's TTL to its own (never shortens it: a request
-- racing this one keeps its own), and an unmark sets it from the entries left, so a request refused
-- or failed gives the key no later expiry than the others gave it. The entry of an older replica (a
-- bare accepted_ms, no deadline of its own) leaves the TTL as it is; entries whose deadline passed
-- lapse with the key. An unmark of an entry not there (published, withdrawn, lapsed) writes nothing.
-- A mark is written for the service's command timeout only, and extended to the request's whole
-- TTL (counted from accepted_ms) by the request once it has the mark's answer: a mark whose answer
-- was lost (Redis stalled, its write buffered, landing after the request's 503) lapses that soon,
-- whenever it lands and whatever overtook it. An extend that lands past the entry's deadline writes
-- nothing (its own answer may have been lost too); one whose entry a DELETE replaced by P:withdrawn
-- answers 1 (the publish refuses the id). A mark whose entry is there already (a copy of the write
-- landing late) writes nothing, so it never shortens an extended entry.
-- A keep pushes a live entry to ttl_ms past now, never earlier than it was, for a request that outlives
-- the TTL it was extended to (service/pipeline/step_keeper.py, the request's own process while it
-- lives): an entry not there (taken back, withdrawn, published, lapsed with the key) or past its
-- deadline is never written again, so a replica that dies leaves its mark to lapse at the last one.
-- An id a DELETE withdrew (P:withdrawn in place of P:planning) has its withdrawal pushed to ttl_ms
-- instead, never shortened: it had lived the retention or what the mark had left, and a request
-- living past both (a retention of a minute) had published the step its trainer gave up.
-- ARGV: op ('mark', 'extend', 'keep' or 'unmark'), nonce, ttl_ms (mark, extend, keep), now ('' =
-- server). Returns 1, or 0 when the unmark found no entry, the extend no live one, or the keep neither
-- a live one nor a withdrawal.
local key = k('planning')
local now = now_ms(ARGV[4])
if ARGV[1] == 'mark' then
  if redis.call('HEXISTS', key, ARGV[2]) == 1 then return 1 end
  local ttl = tonumber(ARGV[3])
  redis.call('HSET', key, ARGV[2], int(now) .. ':' .. int(now + ttl))
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  return 1
end
if ARGV[1] == 'extend' then
  local entry = redis.call('HGET', key, ARGV[2])
  if not entry then return redis.call('EXISTS', k('withdrawn')) end
  local accepted, deadline = string.match(entry, '^(%d+):(%d+)$')
  if not deadline or now > tonumber(deadline) then return 0 end
  local until_ms = tonumber(accepted) + tonumber(ARGV[3])
  redis.call('HSET', key, ARGV[2], accepted .. ':' .. int(until_ms))
  if redis.call('PTTL', key) < until_ms - now then redis.call('PEXPIRE', key, int(until_ms - now)) end
  return 1
end
if ARGV[1] == 'keep' then
  local entry = redis.call('HGET', key, ARGV[2])
  local ttl = tonumber(ARGV[3])
  if not entry then
    local left = redis.call('PTTL', k('withdrawn'))
    if left == -2 then return 0 end
    if left >= 0 and left < ttl then redis.call('PEXPIRE', k('withdrawn'), ttl) end
    return 1
  end
  local accepted, deadline = string.match(entry, '^(%d+):(%d+)$')
  if not deadline or now > tonumber(deadline) then return 0 end
  local until_ms = math.max(tonumber(deadline), now + ttl)
  redis.call('HSET', key, ARGV[2], accepted .. ':' .. int(until_ms))
  if redis.call('PTTL', key) < until_ms - now then redis.call('PEXPIRE', key, int(until_ms - now)) end
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
