"""``Delivery.keep_planning`` on a Redis Cluster: the live requests' step planning entries pushed on,
one pipeline per master, so a master down or stalled costs the pass one failed call and the other
masters' steps are kept all the same.

A cluster's one pipeline over several masters raised at one master down (connection refused) and had
sent nothing to the others (measured: reaper49): every step's entries lapsed under their live requests
while that master was down. Sent again step by step after it (reaper49), a stalled master (SIGSTOPped:
it accepts and does not answer) then cost the pipeline's timeouts and each of its steps' own in turn,
three timeouts a call (the service's client retries twice): 4 steps' entries and 4 marks on it made a
tick 28 s long at the service's 1 s timeout (cluster50). Nor is redis-py's ``execute`` of a pipeline
of one master's steps one call on a stalled master: it sends each command that timed out again on its
own (measured: 3 steps 3.0-3.5 s at a 0.25 s timeout, one call 0.88 s). A call per step (cluster50)
cost a healthy cluster a round trip per due step (10 steps: 2.3-4.5 ms as one pipeline, 13-27 ms a
call each, medians on a 2-core host at load 11-17).

So the due steps are grouped by the master the client's map sends them to, and each group is one
pipeline on that master's own client (``RedisCluster.get_redis_connection`` of the node
``get_node_from_key`` names: public redis-py, cluster51; review50b's ``send_cluster_commands(...,
allow_redirections=False)`` was the cluster pipeline's undocumented method, typed nowhere). A node's
client neither retries nor follows a redirect (redis-py builds it with no retries: the cluster client
retries above it), so a master that times out fails its group once, with that error, nothing resent:
one socket timeout (measured, 4 steps and 4 marks on a stalled master: a tick 0.25 s at a 0.25 s
timeout and 1.0 s at 1 s, where the cluster pipeline's own retries took 0.89 s and 3.15 s); the
node's own client never re-reads the map, so where that master has been failed over, a tick stayed on
it, and the next ticks too, until some other call on the client's path re-read the map (measured,
review51b: three ticks on the old master). So another master is asked whether the slot still is the
stalled master's (one ``CLUSTER SLOTS``), and the map is read where it names another
(``Unanswered.remapped``, ``remap.py``: one ask a timed-out master a pass; the keeper asked twice
before, a timeout more on a second stalled master, review53b); where it has moved, the steps go on the
client's path as after a refused connection, below, and reach the new master. A master
that refused or dropped the connection (its process gone, which a failover replaces) has its first
step sent again alone on the client's path, whose retries ask the cluster for its slots again and so
find a failover's new master (or, where those retries' refresh was not due, redis-py's once a second,
the keeper's own read of the map: ``Unanswered.sent``, cluster52); the rest follow it there, or fail
with its error. A step answered with
a redirect, or its slot moving (MOVED, ASK, TRYAGAIN), is sent again alone, on the client's
own path, which follows it and mends its map; a group of one step is sent so from the start, and so
is a step whose slot the map sends nowhere. A step a node answers "Hash slot not served" is not sent
again (the client's path waits 0.25 s and fails the same): the node is asked which slots it knows no
master for, once a pass, and the pass's later keys of those slots that the client sends to it fail
with that refusal, unasked (``unanswered.py``: its own slots only). A master that did not answer
(``NODE_DOWN``) is not asked again in the pass: its
later steps fail with that error, unasked (the step keeper's marks of that tick pass it over too), and
a node's "The cluster is down" fails every step. Any other error fails its own step only: each master
has its own memory, so an OOM refusal (a master at its ``maxmemory``) is that master's steps', and a
key of the wrong type is its step's (reach49).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from service.delivery import keys as keyspace
from service.delivery.errors import REDIS_FAILED, cluster_down, not_served
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
# A step's answer the client's own path follows or waits out (a slot moved or moving, failing over)
RESENT_ALONE: tuple[type[Exception], ...] = (MovedError, AskError, TryAgainError, ClusterDownError)

Members = Mapping[int, Sequence[str]]  # step -> the members of its planning entries to push on


class _Step(NamedTuple):
    step: int
    key: str
    names: Sequence[str]


def keep_each(
    client: RedisCluster, prefix: str, members: Members, life_ms: int, unanswered: Unanswered
) -> dict[int, Exception]:
    """A pipeline per master of ``members``' steps: the steps not kept, each with its error (Redis's
    own, or the one its master did not answer with earlier in the pass)."""
    failed: dict[int, Exception] = {}
    for group in _by_master(prefix, members, unanswered):
        asked: list[_Step] = []
        for each in group:  # its master not answering, its slot unserved, earlier in the pass
            known = unanswered.known(each.key)
            if known is None:
                asked.append(each)
            else:
                failed[each.step] = known
        if len(asked) == 1:
            failed.update(_kept_alone(client, asked[0], life_ms, unanswered))
        elif asked:
            failed.update(_kept_together(client, asked, life_ms, unanswered))
    return failed


def _by_master(prefix: str, members: Members, unanswered: Unanswered) -> list[list[_Step]]:
    """``members``' steps by the master the client sends each to; a step with none is a group alone."""
    groups: dict[str, list[_Step]] = defaultdict(list)
    alone: list[list[_Step]] = []
    for step, names in members.items():
        each = _Step(step, keyspace.step_planning(step, prefix), names)
        master = unanswered.master(each.key)
        if master is None:
            alone.append([each])
        else:
            groups[master].append(each)
    return [*groups.values(), *alone]


def _kept_together(
    client: RedisCluster, group: list[_Step], life_ms: int, unanswered: Unanswered
) -> dict[int, Exception]:
    """``group`` (one master's steps) in one pipeline on that master's own connection, which neither
    retries nor follows a redirect; a step answered with a redirect, or its slot not served now, sent
    again alone (``_kept_alone``)."""
    try:
        node = client.get_node_from_key(group[0].key)  # type: ignore[no-untyped-call]
        pipe = client.get_redis_connection(node).pipeline(transaction=False)
        for each in group:
            pipe.eval(KEEP, 1, each.key, life_ms, *each.names)
        answers = pipe.execute(raise_on_error=False)
    except REDIS_FAILED as error:  # its master did not answer
        return _not_answered(client, group, life_ms, unanswered, error)
    failed: dict[int, Exception] = {}
    for each, answer in zip(group, answers, strict=True):
        if not isinstance(answer, Exception):
            continue
        if not_served(answer):  # the node's own word (no redirect to follow): learned, not sent again
            unanswered.met(each.key, answer)
        if isinstance(answer, RESENT_ALONE) and not cluster_down(answer):
            failed.update(_kept_alone(client, each, life_ms, unanswered))
        else:
            unanswered.met(each.key, answer)
            failed[each.step] = answer
    return failed


def _not_answered(
    client: RedisCluster, group: list[_Step], life_ms: int, unanswered: Unanswered, error: Exception
) -> dict[int, Exception]:
    """``group``'s master did not answer its pipeline. A refused or dropped connection (its process
    gone, which a failover replaces): the first step is sent again alone on the client's path, whose
    retries ask the cluster for its slots again and follow a failover; answered there, the others are
    sent alone too, else they fail with its error, unasked. A timeout (a master stalled: it accepts and
    does not answer) is its group's error, nothing sent again (each call would wait it out again),
    unless another master says the slot has moved and the map read names its new master
    (``Unanswered.remapped``: a failover): then each step is sent alone, there."""
    if not isinstance(error, redis.ConnectionError) and not unanswered.remapped(group[0].key, error):
        unanswered.met(group[0].key, error)  # its slot still its own, or no map read names another
        return {each.step: error for each in group}
    failed: dict[int, Exception] = {}
    for each in group:
        failed.update(_kept_alone(client, each, life_ms, unanswered))
    return failed


def _kept_alone(
    client: RedisCluster, each: _Step, life_ms: int, unanswered: Unanswered
) -> dict[int, Exception]:
    """``each`` in a call of its own, on the client's path (its redirections and retries); where its
    master did not answer and a map read again now names another (``Unanswered.remapped``: a failover
    the client's paced refresh had not seen), sent once more, to that one."""
    known = unanswered.known(each.key)
    if known is not None:
        return {each.step: known}
    try:
        unanswered.sent(each.key, lambda: client.eval(KEEP, 1, each.key, life_ms, *each.names))
    except REDIS_FAILED as error:
        unanswered.met(each.key, error)
        return {each.step: error}
    return {}
