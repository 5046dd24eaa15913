"""What one walk over schedules (a heartbeat, a sidecar's claim, a reaper pass) could not reach, so it
goes on with the others on a Redis Cluster that serves part of its slots.

A Redis Cluster serves each schedule's keys (one hash slot: ``keys.py``) from that slot's master. Under
``cluster-require-full-coverage no`` a slot no master serves (``SLOT_NOT_SERVED``: CLUSTERDOWN, the
client's slot map short of it) or a master that is down (its process gone: the client's
``ConnectionError`` after its retries, 0.12-0.13 s with ``redis_conn.short_retry``, or a
``TimeoutError``) stops only the schedules on it; the others answer at once. A walk that raised at the
first such schedule served none after it: a claim leased nothing while younger schedules waited, a
heartbeat left the leases after it unextended (the reaper requeued them under a sidecar still running
them), a pass reaped nothing after it.

So a walk records each such error against the schedule (``missed``) and goes on. What it remembers
keeps the walk's cost to one failed call per slot or node, not one per schedule: a schedule whose slot
failed, or on a cluster whose node failed, is passed over unasked (``passed_over``), with that error.
On a single Redis a connection error is the whole server, and is raised at once, as before.

What an outage is on a cluster (decided by reaper49): a node that answers "The cluster is down" (its
``cluster_state`` is ``fail``: under ``cluster-require-full-coverage yes`` one unserved slot makes every
node refuse every key) speaks for every slot, so the walk passes every schedule after it over, and
raises it at once when it has reached nothing. Otherwise a walk that has reached nothing raises once
it has failed on ``TRIED_DOMAINS`` masters: a slot's failure counts for the master the client sends
that slot to, so one master down, or any number of its slots unserved, is never an outage while the
other masters serve (each of its unserved slots counted apart, two of them first in a walk gave the
whole walk up). A slot the client's map sends nowhere (a client built with
``require_full_coverage=False`` drops a slot no master holds; the service's clients keep the last
full map instead) has no master to count for: all such slots count together as one (``UNMAPPED``),
so two of them first in a walk were no outage either (reach49; before, each counted as a master of
its own). The caller decides what the rest is: ``outage`` is the error to raise when nothing was
reached at all.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException

from service.delivery import keys as keyspace
from service.delivery.calls import RedisClient
from service.delivery.errors import NODE_DOWN, SLOT_NOT_SERVED

TRIED_DOMAINS = 2  # masters failed, none reached, after which the walk is an outage
CLUSTER_DOWN = "The cluster is down"  # a node's CLUSTERDOWN for every slot (its cluster_state fail)
UNMAPPED = ("node", None)  # the "master" of every slot the client's map sends nowhere


@dataclass
class Reach:
    """One walk's schedules not reached, each with its error, and the slots and nodes that failed."""

    client: RedisClient  # the walk's: a ``RedisCluster``'s connection error is one node's
    prefix: str = keyspace.DEFAULT_PREFIX
    missing: dict[str, Exception] = field(default_factory=dict)  # schedule id -> why not reached
    answered: set[str] = field(default_factory=set)  # schedules that answered (gone, or refusing, too)
    _failed: dict[Hashable, Exception] = field(default_factory=dict, init=False)  # slot or node -> error
    _masters: set[Hashable] = field(default_factory=set, init=False)  # masters a failure counted for
    _down: Exception | None = field(default=None, init=False)  # a node's "cluster is down": every slot

    @property
    def catches(self) -> tuple[type[Exception], ...]:
        """The errors that are one slot's or node's, not Redis's: what the walk's ``except`` names."""
        return SLOT_NOT_SERVED + NODE_DOWN if self._cluster else SLOT_NOT_SERVED

    @property
    def reached(self) -> bool:
        """Whether any schedule answered this walk."""
        return bool(self.answered)

    def got(self, schedule_id: str) -> None:
        """``schedule_id`` answered (its keys gone, or a script's error reply, are answers too)."""
        self.answered.add(schedule_id)

    @property
    def _cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    def passed_over(self, schedule_id: str) -> bool:
        """Whether ``schedule_id``'s slot or node failed already in this walk: then it is recorded
        missing with that error, and not asked."""
        if self._down is not None:
            self.missing[schedule_id] = self._down
            return True
        if not self._failed:
            return False
        for domain in (self._slot(schedule_id), self._node(schedule_id)):
            if domain is not None and domain in self._failed:
                self.missing[schedule_id] = self._failed[domain]
                return True
        return False

    def missed(self, schedule_id: str, error: Exception) -> None:
        """Record ``error`` (one of ``catches``) for ``schedule_id`` and its slot, or its node when the
        node did not answer, or every schedule when a node said the cluster is down; raise it when the
        walk has reached nothing and that is the cluster down or ``TRIED_DOMAINS`` masters failed.
        A schedule that answered earlier in the walk (its settings read) and fails now is not reached:
        counted as answered, a claim that failed on the only schedule was no outage, an empty answer."""
        self.missing[schedule_id] = error
        self.answered.discard(schedule_id)
        if cluster_down(error):
            self._down = error
            if not self.reached:
                raise error
            return
        node, slot = self._node(schedule_id), self._slot(schedule_id)
        self._failed[node if isinstance(error, NODE_DOWN) and node is not None else slot] = error
        self._masters.add(node if node is not None else UNMAPPED if self._cluster else slot)
        if not self.reached and len(self._masters) >= TRIED_DOMAINS:
            raise error

    def outage(self) -> Exception | None:
        """The error to raise for a walk that reached nothing and missed something; else None."""
        if self.reached or not self.missing:
            return None
        return next(iter(self.missing.values()))

    def _slot(self, schedule_id: str) -> Hashable:
        return ("slot", key_slot(keyspace.schedule_keys(schedule_id, self.prefix).meta.encode()))

    def _node(self, schedule_id: str) -> Hashable:
        """The node the client sends ``schedule_id``'s keys to; None when it knows none."""
        if not isinstance(self.client, RedisCluster):
            return None
        try:
            meta = keyspace.schedule_keys(schedule_id, self.prefix).meta
            node = self.client.get_node_from_key(meta)  # type: ignore[no-untyped-call]
        except RedisClusterException:  # its slot map short of the slot
            return None
        return None if node is None else ("node", node.name)


def cluster_down(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling, a node's "CLUSTERDOWN The cluster is down"
    (the cluster client raises its own "slots not covered" after it, the node's error its context)."""
    seen: BaseException | None = error
    for _ in range(4):  # the client's error, the node's under it: a short chain
        if seen is None:
            return False
        if isinstance(seen, ClusterDownError) and CLUSTER_DOWN in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
