"""``Delivery.keep_planning`` on a Redis Cluster: the live requests' step planning entries pushed on,
a call per step, so a master down or stalled costs the pass one failed call and the other masters'
steps are kept all the same.

A cluster's one pipeline over several masters raised at one master down (connection refused) and had
sent nothing to the others (measured: reaper49): every step's entries lapsed under their live requests
while that master was down. Sent again step by step after it (reaper49), a stalled master (SIGSTOPped:
it accepts and does not answer) then cost the pipeline's timeouts and each of its steps' own in turn,
three timeouts a call (the service's client retries twice): 4 steps' entries and 4 marks on it made a
tick 28 s long at the service's 1 s timeout (cluster50). Nor is a pipeline of one master's steps one
call on a stalled master: redis-py's cluster pipeline, its connection open when the stall began, sends
each command that timed out again on its own (measured: 3 steps 3.0-3.5 s at a 0.25 s timeout, one
call 0.88 s). So each step goes on its own (a round trip each when all answer: only overrunning
requests' steps are kept, a few a tick; 10 steps: 2.3-4.5 ms before, 13-27 ms now, medians on a
2-core host at load 11-17), and a master that did not answer (``NODE_DOWN``) is not asked again in
the pass: its later steps fail with that error, unasked (``unanswered.py``; the step keeper's marks
of that tick pass it over too). Any
other error fails its own step only, and the steps after it are still sent: each master has its own
memory, so an OOM refusal (a master at its ``maxmemory``) is that master's steps', and a key of the
wrong type is its step's (reach49).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.cluster import RedisCluster

from service.delivery import keys as keyspace
from service.delivery.errors import REDIS_FAILED
from service.delivery.unanswered import Unanswered

# Push entries of ``keys.step_planning`` (KEYS[1]) of requests still alive (ARGV[2..]) to ARGV[1] ms
# past now: only those still there (a take-back is final: XX) and only ever later (GT).
KEEP = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', 'GT', deadline, ARGV[i]) end
if redis.call('PTTL', KEYS[1]) >= 0 and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
"""

Members = Mapping[int, Sequence[str]]  # step -> the members of its planning entries to push on


def keep_each(
    client: RedisCluster, prefix: str, members: Members, life_ms: int, unanswered: Unanswered
) -> dict[int, Exception]:
    """A call per step of ``members``: the steps not kept, each with its error (Redis's own, or the
    one its master did not answer with earlier in the pass)."""
    failed: dict[int, Exception] = {}
    for step, names in members.items():
        key = keyspace.step_planning(step, prefix)
        known = unanswered.known(key)
        if known is not None:
            failed[step] = known
            continue
        try:
            client.eval(KEEP, 1, key, life_ms, *names)
        except REDIS_FAILED as error:
            unanswered.met(key, error)
            failed[step] = error
    return failed
