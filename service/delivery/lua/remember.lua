-- remember: store the publishing request's work digest in the schedule's meta hash, only while the
-- schedule exists. One atomic step: an EXISTS then HSET pair let a meta that expired or was evicted
-- in between be recreated by the HSET, without expiry, holding nothing but the digest (a leaked key
-- that made every later request under the id a 422).
-- ARGV: field, digest. Returns 1 when stored, 0 when the schedule is gone.
if redis.call('EXISTS', META) == 0 then return 0 end
redis.call('HSET', META, ARGV[1], ARGV[2])
return 1
