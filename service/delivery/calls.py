"""How ``Delivery`` reaches its Lua scripts: one EVALSHA on the schedule's meta key, or several in one
pipeline, a script's error reply as the typed error it stands for, and the settled flag the
state-changing scripts append. ``Delivery`` (``protocol``) inherits this and adds one method per
operation; kept apart so each module reads in one sitting.

The worker ids those operations name are checked here too (``worker``, and ``by_holder`` for the
holders of the leases a heartbeat or a hand-back groups), once, by the rule a publish checks its own
ids by (``records.check_name``): the scripts join them into '|'-separated records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Self, cast

import redis
from redis.cluster import RedisCluster

from service.delivery import keys as keyspace
from service.delivery.errors import (
    NODE_DOWN,
    OUT_OF_MEMORY,
    SLOT_NOT_SERVED,
    MarkLapsedError,
    ScheduleConflictError,
    ScheduleWithdrawnError,
    UnknownScheduleError,
)
from service.delivery.hangable import hangable, hangable_cluster
from service.delivery.indexes import DeliveryIndexes
from service.delivery.records import Lease, check_name
from service.delivery.remap import remapped
from service.delivery.retries import short_retry
from service.delivery.scripts import Scripts, evaluate, register
from service.delivery.stored import REPLY_DECODING

log = logging.getLogger(__name__)
RedisClient = redis.Redis | RedisCluster
# Replies of a script the server did not run (a cluster redirect, a slot on the move: lua/common.lua).
# By class: redis-py strips the code (MOVED ...) off the message of each, so a test of the message's
# start never matched, and complete_and_claim raised MovedError after its schedule's slot moved.
_NOT_RUN = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


class ScriptCalls(DeliveryIndexes):
    """The script calls of the delivery protocol on one Redis (or Redis Cluster) deployment."""

    def __init__(self, client: RedisClient, prefix: str = keyspace.DEFAULT_PREFIX) -> None:
        """Wrap ``client``; scripts are registered now and loaded lazily on first use."""
        self.client = client
        self.prefix = prefix
        self.scripts: Scripts = register(client)
        self.unlisted = {}  # ``DeliveryIndexes.unlisted``

    @classmethod
    def from_url(cls, url: str, prefix: str = keyspace.DEFAULT_PREFIX, cluster: bool = False) -> Self:
        """Connect to ``url`` (``redis://``, ``rediss://``, ACL user:password accepted); a client a
        sidecar built so can hang up at its shutdown (``hangable``). A cluster client retries as the
        service's (``short_retry``): redis-py's own cost ~3.5 s a call to a master that is down."""
        if cluster:
            return cls(hangable_cluster(url, retry=short_retry(), **REPLY_DECODING), prefix)
        return cls(hangable(url, **REPLY_DECODING), prefix)

    def _call(self, script: Any, schedule_id: str, args: Sequence[Any]) -> Any:
        """One EVALSHA of ``script`` on the schedule's meta key; on NOSCRIPT (a restarted server, a
        failed-over node) its body is run (``scripts.evaluate``). Sent directly rather
        than through ``Script.__call__``, whose two imports and argument tuples per call were a few
        us of every one-item claim and completion's client time (docs/experiments.md, "Delivery")."""
        meta = self.keys(schedule_id).meta
        try:
            return evaluate(self.client, script, [meta], list(args))
        except redis.ResponseError as err:
            raise _mapped(err, schedule_id) from None

    def _settled(self, schedule_id: str, reply: Sequence[Any]) -> Sequence[Any]:
        """Strip the settled flag the state-changing scripts append; retire the schedule on a 1.

        Whatever settles the last item (a completion, a failure or an expired lease dead-lettered by
        a heartbeat, a release or the reaper) must take the schedule out of the sidecars' inboxes and
        the reapers' index at once, or they keep polling finished work until its retention passes.

        A node that does not answer that retire (``NODE_DOWN``), or a slot of it not served
        (``SLOT_NOT_SERVED``: ops66), or out of memory (``OUT_OF_MEMORY``, ops67: a retire is ZREMs,
        which a node at its ``maxmemory`` runs, so only a later write of it would be refused), is a
        WARNING, and the script's answer stands: raised, the
        caller's retry ran the script again, answered ``DUPLICATE`` (or the same leases) and raised
        again while the node was down, so an accepted result was held unanswered (cluster55). The
        schedule stays in the reapers' index where the retire did not end (``_retire``), and a reap
        of a settled schedule retires it again."""
        if int(reply[-1]) == 1:
            try:
                self._retire(schedule_id)
            except NODE_DOWN + SLOT_NOT_SERVED + OUT_OF_MEMORY as error:
                log.warning(
                    "schedule %s settled, its retire from the indexes left to the reapers: %s",
                    schedule_id,
                    error,
                )
        return reply[:-1]

    def _pipelined(self, schedule_id: str, calls: Sequence[tuple[Any, Sequence[Any]]]) -> list[Any]:
        """Send the scripts in one pipeline; rerun alone (through ``_call``) any that the server did
        not run: NOSCRIPT after a restart, or a cluster redirect (MOVED/ASK/TRYAGAIN) mid-resharding.

        On a cluster the pipeline goes to the slot's master on its own client (redis-py refuses
        EVALSHA in cluster pipelines), whose failure reads no map: after a failover every try went
        to the old master, ``ConnectionError`` for good (cluster55: 351 tries over 20 s). So it is
        sent as a sidecar's own calls are (``remap.remapped``): where the master did not answer and
        another names a new one for the slot, the map is read and the pipeline sent once more, to the
        new master. Sent again, each script answers as for a lost reply: a completion that ran
        ``DUPLICATE``, a claim its call id's first leases."""
        meta = self.keys(schedule_id).meta
        if isinstance(self.client, RedisCluster):
            client = cast(Any, self.client)
            replies = remapped(
                client, meta, lambda: _piped(client.get_node_from_key(meta).redis_connection, meta, calls)
            )
        else:
            replies = _piped(self.client, meta, calls)
        for i, (reply, (script, args)) in enumerate(zip(replies, calls, strict=True)):
            if isinstance(reply, (redis.exceptions.NoScriptError, *_NOT_RUN)):
                replies[i] = self._call(script, schedule_id, args)
            elif isinstance(reply, redis.ResponseError):
                raise _mapped(reply, schedule_id)
        return replies


def _piped(target: Any, meta: str, calls: Sequence[tuple[Any, Sequence[Any]]]) -> list[Any]:
    """One pipeline of ``calls`` on ``meta`` sent to ``target``: the client itself on a single Redis,
    on a cluster the own client of the master the client's map names as it is sent (a new one after
    ``remapped`` read the map again)."""
    pipe = target.pipeline(transaction=False)
    for script, args in calls:
        pipe.evalsha(script.sha, 1, meta, *args)
    return list(pipe.execute(raise_on_error=False))


def worker(worker_id: str) -> str:
    """``worker_id``, once checked as a publish checks its workers (``InvalidInputError`` naming it):
    a claim, steal, heartbeat, report or hand-back in the name of an id no publish takes would write
    it into the records and keys of the schedule. Called before anything is sent."""
    check_name("worker_id", worker_id)
    return worker_id


def by_holder(leases: Iterable[Lease]) -> dict[tuple[str, str], list[Lease]]:
    """Leases by (schedule, holding worker), in order: each group is one script call, which checks
    that the worker still holds every lease it names (not only the token). Every holder is checked
    before any group is sent: an empty one would mean any holder to the scripts."""
    groups: dict[tuple[str, str], list[Lease]] = {}
    for lease in leases:
        groups.setdefault((lease.schedule_id, lease.worker_id), []).append(lease)
    for _, holder in groups:
        worker(holder)
    return groups


def _mapped(err: redis.ResponseError, schedule_id: str) -> Exception:
    """The typed error a script's error reply stands for (the reply itself when it is not ours)."""
    msg = str(err)
    if msg.startswith("NOSCHEDULE"):
        return UnknownScheduleError(schedule_id)
    if msg.startswith("CONFLICT"):
        return ScheduleConflictError(schedule_id)
    if msg.startswith("WITHDRAWN"):
        return ScheduleWithdrawnError(schedule_id)
    if msg.startswith("UNMARKED"):
        return MarkLapsedError(schedule_id)
    return err
