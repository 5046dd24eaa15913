"""An announce that has not reached every inbox: its mark, and the reapers' announce of it again.

A publish stores the schedule in one script, then announces it (``DeliveryIndexes._announce``): the
active index and each worker's inbox, keys of other slots, one pipeline per cluster node. Where the
master holding some inboxes does not answer, those workers' sidecars never learn of the schedule unless
the client retries the publish once that master is back (announce64); a trainer that gave up on the 503,
or crashed, left their items to thieves, if any (reannounce65).

So an announce marks the schedule before it writes anything (``P:meta`` ``announcing``, ``BEGIN``: the
check that it is unsettled, in the same script, so a cancelled or finished schedule is never marked nor
announced), lists it in the announcing index (``keys.announcing_index``: in the active index's slot,
first in that node's pipeline, which ``_each_node`` sends first), and clears the mark only once every
node answered (``END``). Both ride round trips the announce made already (its settled check before and
after the writes, one script each on the schedule's slot, the active index's pipeline): an announce
where every node answers sends no more calls than before (a publish one more since ops67: below). Mark
and listing are in Redis, so a service restart
loses nothing: a reaper of any replica reads the index (with what is due, one script:
``walk_for_reaping``), and a schedule listed there long enough for its announce to be over
(``keys.REANNOUNCE_AFTER_MS``) whose mark still holds is announced again (``Delivery.announce``, the
same announce); one whose mark was cleared leaves the index (``DROP``: only the entry read, so a later
announce's entry stays).

A publish lists the schedule before its script stores it (``list_ahead``), and that script marks it
as it stores it, so a process killed anywhere after the store (before ``BEGIN``, or before the active
index's pipeline) leaves it listed and marked: a reaper of any replica announces it (ops67; before,
only the client's retry repaired it). Where the active index's node did not answer (down, or out of
memory, from before the publish), nothing lists the schedule: the process that announced it keeps it
in memory (``DeliveryIndexes.unlisted``) and its reaper announces it again once that node answers
(``relist``, ops66). That process dying first leaves it to the client's retry: no key on a node that
answered lists it, and the reapers scan no keys (a listing on a second node would be a command more
in every reaper pass: docs/experiments.md, ops67).

Announcing again is safe: an inbox is a sorted set, one entry per schedule id, so a second announce
changes nothing there, and a claim decides on the schedule's own keys (each item leased once). A
schedule cancelled, finished or expired meanwhile is not written back: ``BEGIN`` finds it settled,
clears its mark and has it retired; one settled while the writes were under way is retired by the check
after them (``END``), also where a node did not answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from service.delivery import keys as keyspace
from service.delivery.errors import (
    NODE_DOWN,
    OUT_OF_MEMORY,
    REDIS_FAILED,
    SLOT_NOT_SERVED,
    UnknownScheduleError,
)
from service.delivery.scripts import evaluate
from service.delivery.views import text

log = logging.getLogger(__name__)

# Mark an announce about to start: KEYS[1] ``P:meta``, KEYS[2] ``P:counts`` (one slot); ARGV[1] the
# retention (s) it announces for, what a reaper's announce again uses. An unsettled schedule is marked
# and answers {published_ms, server ms now} (the announcing index's score); a settled one (finished or
# cancelled: cancel.lua moves every queued and running item to c) has its mark cleared and answers
# false, as does one whose keys are gone (nothing written: no key brought back without its expiry).
BEGIN = """
local m = redis.call('HMGET', KEYS[1], 'published_ms', 'total')
if not m[2] then return false end
local c = redis.call('HMGET', KEYS[2], 'd', 'f', 'c')
if tonumber(m[2]) <= (tonumber(c[1]) or 0) + (tonumber(c[2]) or 0) + (tonumber(c[3]) or 0) then
  redis.call('HDEL', KEYS[1], 'announcing')
  return false
end
redis.call('HSET', KEYS[1], 'announcing', ARGV[1])
local t = redis.call('TIME')
return {tonumber(m[1]), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
"""

# After the announce's writes: KEYS as ``BEGIN``'s; ARGV[1] '1' where every node answered (the mark is
# cleared), '' where one did not (kept). Answers 1 while the schedule is unsettled, else 0 (retire it).
END = """
if ARGV[1] == '1' then redis.call('HDEL', KEYS[1], 'announcing') end
local total = redis.call('HGET', KEYS[1], 'total')
if not total then return 0 end
local c = redis.call('HMGET', KEYS[2], 'd', 'f', 'c')
if tonumber(total) <= (tonumber(c[1]) or 0) + (tonumber(c[2]) or 0) + (tonumber(c[3]) or 0) then return 0 end
return 1
"""

# Drop an entry of the announcing index (KEYS[1]) only where it still has the score read (ARGV[2]):
# an announce begun since rewrote it, and may not reach every inbox.
DROP = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""


# List a schedule about to be published in the announcing index (KEYS[1]) at that node's ms now, before
# the publish's script stores and marks it: a process killed after that script and before its announce
# lists it leaves it where the reapers read (ops67). A publish refused leaves an entry with no mark,
# which a reaper drops, as it drops a finished announce's.
LIST = """
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
"""


@dataclass(frozen=True)
class MarkScripts:
    """The mark's scripts, registered on one client (``Script`` only hashes the body: no call)."""

    begin: Script
    end: Script
    drop: Script
    listing: Script

    @classmethod
    def on(cls, client: Any) -> MarkScripts:
        """The scripts for ``client`` (a Redis or RedisCluster)."""
        return cls(*(client.register_script(body) for body in (BEGIN, END, DROP, LIST)))


def list_ahead(delivery: Any, schedule_id: str) -> None:
    """List ``schedule_id`` in the announcing index before its publish's script (``LIST``), which
    marks it as it stores it: whatever kills the process from there to its announce's listing, a
    reaper of any replica finds it listed and marked and announces it (ops67; before, only the
    client's retry did). One round trip more a publish. On a Redis Cluster a failure is logged and
    the publish goes on (the announce meets that node again: ``unlisted``); on one Redis it is the
    whole server's, raised."""
    delivery.marks = delivery.marks or MarkScripts.on(delivery.client)
    index = keyspace.announcing_index(delivery.prefix)
    try:
        evaluate(delivery.client, delivery.marks.listing, [index], [schedule_id])
    except REDIS_FAILED as error:
        if not isinstance(delivery.client, RedisCluster):
            raise
        log.info("schedule %s not listed ahead of its publish: %s", schedule_id, error)


def begin(
    client: Any, scripts: MarkScripts, keys: keyspace.ScheduleKeys, retention_s: int
) -> tuple[int, int] | None:
    """Mark the schedule's announce as begun (``BEGIN``): its publish time and the server's ms now, or
    None where it is settled or gone (its mark cleared: retire it, announce nothing)."""
    reply = evaluate(client, scripts.begin, [keys.meta, keys.counts], [retention_s])
    return None if not reply else (int(reply[0]), int(reply[1]))


def end(client: Any, scripts: MarkScripts, keys: keyspace.ScheduleKeys, complete: bool) -> bool:
    """After the announce's writes (``END``): its mark cleared where ``complete`` (every node answered);
    whether the schedule is still unsettled (False: it settled or was cancelled meanwhile, retire it)."""
    return bool(evaluate(client, scripts.end, [keys.meta, keys.counts], ["1" if complete else ""]))


@dataclass
class Reannounced:
    """What one reaper pass's announces again did: ``reannounce``'s, of the schedules the announcing
    index lists, or ``relist``'s, of those this process holds ``unlisted`` (one that another announce
    listed meanwhile is in none: that announce did the work). tests/service/delivery/test_reannounce.py
    pins both readings."""

    # announced again, every node answering: every inbox and the active index hold it, its mark cleared
    announced: list[str] = field(default_factory=list)
    # not announced, nothing left to do: settled, cancelled or gone (expired); ``reannounce`` also drops
    # one whose mark another announce cleared, its entry with it; ``relist``'s leave ``unlisted``
    dropped: list[str] = field(default_factory=list)
    # left to the next pass, by schedule id: a node or slot out (the rest of the pass waits too), or its
    # keys damaged (skipped); ``reannounce`` names the announcing index where reading it failed
    missed: dict[str, Exception] = field(default_factory=dict)


def reannounce(
    delivery: Any,
    after_ms: int = keyspace.REANNOUNCE_AFTER_MS,
    count: int = keyspace.REANNOUNCE_BATCH,
    listed: Sequence[tuple[str, str]] | None = None,
) -> Reannounced:
    """Announce again the schedules whose announce did not reach every inbox (a ``Delivery``'s), the
    oldest ``count`` listed at least ``after_ms`` ago; drop the entries whose mark was cleared.
    ``listed``: those entries with their scores, where the caller read them already (a reaper pass
    reads them with what is due, one script: ``walk_for_reaping``); None: read here.

    The pass stops at the first call that fails (a node down, the index's own or an inbox's): the
    rest wait for the next pass, so a dead master costs a pass one failed call (0.13 s with the
    service's client), not one per schedule. A schedule announced again but not to every inbox keeps
    its mark, and its entry is rewritten with the new announce's time, so it comes back ``after_ms``
    later, behind the others."""
    done = Reannounced()
    delivery.marks = delivery.marks or MarkScripts.on(delivery.client)  # its DROP
    if listed is None:
        try:
            listed = delivery.walk_for_reaping(after_ms=after_ms, count=count).listed
        except REDIS_FAILED as error:
            done.missed[keyspace.announcing_index(delivery.prefix)] = error
            return done
    scores = dict(listed)
    _each(done, list(scores), lambda schedule_id: _again(delivery, schedule_id, scores[schedule_id], done))
    return done


def relist(delivery: Any) -> Reannounced:
    """Announce again the schedules whose announce in this process did not list them: the active
    index's node did not answer it, so neither index holds them and no reaper would find them
    (``DeliveryIndexes.unlisted``, in memory: a process that dies first leaves them to the client's
    retry). Run by a reaper pass once it has read that node. Each leaves ``unlisted`` once an
    announce of it lists it (or finds it settled or gone); nothing is sent where none is held."""
    done = Reannounced()

    def one(schedule_id: str) -> None:
        retention_s = delivery.unlisted.get(schedule_id)
        if retention_s is None:  # listed meanwhile by another thread's announce (a retried publish)
            return
        try:
            announced = delivery.announce(schedule_id, retention_s)
        except UnknownScheduleError:  # expired meanwhile
            delivery.unlisted.pop(schedule_id, None)
            announced = False
        (done.announced if announced else done.dropped).append(schedule_id)
        if announced:
            log.info("announced schedule %s again: its announce had not listed it", schedule_id)

    _each(done, list(delivery.unlisted), one)
    return done


def _each(done: Reannounced, schedule_ids: list[str], one: Callable[[str], None]) -> None:
    """``one`` for each schedule, in order: its keys damaged (a script's error reply) logged and
    skipped, the others go on (listed first at every pass, a stop there starved the rest); a node or
    slot out stops the walk, the rest waiting for the next pass, and so does a node out of memory
    (ops67: a ``ResponseError`` too, it was logged as damage at every schedule of a pass; each
    announce writes the active index's node and, in a fleet, mostly the same inboxes)."""
    for schedule_id in schedule_ids:
        try:
            one(schedule_id)
        except SLOT_NOT_SERVED + NODE_DOWN + OUT_OF_MEMORY as error:  # a node or slot out: next pass
            done.missed[schedule_id] = error
            log.info("announcing schedule %s again failed, next pass: %s", schedule_id, error)
            break
        except (redis.ResponseError, ValueError) as error:  # its keys damaged: the others go on
            done.missed[schedule_id] = error
            log.error("announcing schedule %s again failed, skipped: %s", schedule_id, error)
        except REDIS_FAILED as error:
            done.missed[schedule_id] = error
            break


def _again(delivery: Any, schedule_id: str, score: str, done: Reannounced) -> None:
    """One listed schedule: announced again where its mark holds (``Delivery.announce``, with the
    retention the mark keeps), else its entry dropped."""
    mark = delivery.client.hget(delivery.keys(schedule_id).meta, keyspace.ANNOUNCING)
    if mark is not None:
        try:
            announced = delivery.announce(schedule_id, int(text(mark)))
        except UnknownScheduleError:  # expired meanwhile
            announced = False
        if announced:
            done.announced.append(schedule_id)
            log.info("announced schedule %s again: its announce had not reached every inbox", schedule_id)
            return
        # settled meanwhile: the announce cleared its mark and retired it, entry and all; gone: no mark
    index = keyspace.announcing_index(delivery.prefix)
    evaluate(delivery.client, delivery.marks.drop, [index], [schedule_id, score])
    done.dropped.append(schedule_id)
