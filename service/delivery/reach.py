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

What a walk knows unserved without asking (cluster50): a slot the client's map sends nowhere, once one
such slot has failed in the walk (its call's map refresh found none for it either), is passed over
with that failure's error. And a walk asks the node that has just said a slot is not served which
slots it knows no master for (``coverage.py``), once a walk, and passes over those of them the
client sends to that node (its word on its own slots: its view of the others' can lag, review51b,
and a heartbeat then passed a served lease over at every beat that asked it): each had cost
its own call of 0.26 s (redis-py's fixed wait on that error), ten of a dropped range 2.8 s a reaper
pass. The ask is one blocking call: a walk that ``learns`` (the reaper's, a heartbeat's, each on a
thread of its own) makes it in ``missed``; the sidecar's claim walk, on its event loop, makes it in a
thread after ``missed`` (``unasked``, ``learn``: cluster51; before, it never asked, and paid the
0.26 s at every unserved slot). A schedule passed over so is missed as its call's failure would have
been, its slot's master counted: the outage rule holds as if it had been asked.

What a walk that ``learns`` does where a master did not answer (review52c): the client's own refresh
of its map is paced to once a second, so a heartbeat just after a failover sent a lease's extension to
the old master on every try and left it for a beat (a third of its TTL). So the walk's call goes
through ``sent``: the first failure of each master in the walk reads the map again (``remap.py``, the
step keeper's remedy), and where the schedule's slot has a new master, it is asked once more, there.
A read that no node answers is the cluster down, as a node's "The cluster is down" is: the walk's own
read, or the client's own on its call's retry, which then raises ``RedisClusterUnreachableError`` in
place of the master's ``ConnectionError`` (``errors.whole_cluster_down``). Taken for one slot's error, a
walk on a dead cluster asked every schedule of the first master until a second master's failed, one
failed call each (reach62).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from service.delivery import keys as keyspace
from service.delivery.calls import RedisClient
from service.delivery.coverage import unserved_slots
from service.delivery.errors import NODE_DOWN, SLOT_NOT_SERVED, down_node, not_served, whole_cluster_down
from service.delivery.remap import Remap, resent

T = TypeVar("T")

TRIED_DOMAINS = 2  # masters failed, none reached, after which the walk is an outage
UNMAPPED = ("node", None)  # the "master" of every slot the client's map sends nowhere


@dataclass
class Reach:
    """One walk's schedules not reached, each with its error, and the slots and nodes that failed."""

    client: RedisClient  # the walk's: a ``RedisCluster``'s connection error is one node's
    prefix: str = keyspace.DEFAULT_PREFIX
    learns: bool = False  # asks in ``missed`` which slots are unserved (a blocking call: not on a loop)
    missing: dict[str, Exception] = field(default_factory=dict)  # schedule id -> why not reached
    answered: set[str] = field(default_factory=set)  # schedules that answered (gone, or refusing, too)
    _failed: dict[Hashable, Exception] = field(default_factory=dict, init=False)  # slot or node -> error
    _masters: set[Hashable] = field(default_factory=set, init=False)  # masters a failure counted for
    # the whole cluster down (``errors.whole_cluster_down``, or a read of the map reaching no node): every
    # schedule after it is passed over with this error
    _down: Exception | None = field(default=None, init=False)
    # node (``_node``) -> the slots it knows no master for, and its refusal that had it asked
    _unserved: dict[Hashable, tuple[frozenset[int], Exception]] = field(default_factory=dict, init=False)
    _asking: tuple[ClusterNode, Exception] | None = field(default=None, init=False)  # to ask (``learn``)
    _remap: Remap | None = field(default=None, init=False)  # the map read again (``sent``), made once

    def sent(self, schedule_id: str, send: Callable[[], T]) -> T:
        """``send()``, the walk's call on ``schedule_id``; where its master did not answer and the map
        read again (a walk that ``learns`` only: a blocking call) gives its slot a new master, once more,
        there (``remap.resent``): its error raised otherwise, for ``missed``."""
        if not self.learns:
            return send()
        return resent(keyspace.schedule_keys(schedule_id, self.prefix).meta, send, self._moved)

    def _moved(self, key: str, error: Exception) -> bool:
        """``remap.Remap.moved`` for the walk; a read that reached no node is the cluster down: every
        schedule after it passed over with ``error``."""
        if self._remap is None:
            self._remap = Remap(self.client, self._silenced)
        moved = self._remap.moved(key, error)
        if self._remap.unreachable is not None:
            self._down = self._remap.unreachable
        return moved

    def _silenced(self, node: ClusterNode, error: Exception) -> None:
        """``node`` did not answer the map's ask (``remap.Remap``): its schedules are passed over with
        ``error`` for the rest of the walk, as after one of their calls' failure."""
        self._failed[("node", node.name)] = error

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
        """Whether ``schedule_id``'s slot or node failed already in this walk, or a node said its slot
        is unserved: then it is recorded missing with that error, and not asked. The last is missed as
        its call's failure would have been, so this raises where ``missed`` would: the outage."""
        if self._down is not None:
            self.missing[schedule_id] = self._down
            return True
        if not self._failed:
            return False
        for domain in (self._slot(schedule_id), self._node(schedule_id)):
            if domain is not None and domain in self._failed:
                self.missing[schedule_id] = self._failed[domain]
                return True
        said = self._said_unserved(schedule_id)
        if said is not None:
            self.missed(schedule_id, said)
            return True
        return False

    def _said_unserved(self, schedule_id: str) -> Exception | None:
        """The refusal of the node the client sends ``schedule_id`` to, where that node, asked
        (``learn``), knows no master for its slot; else None. Each node's word on its own slots only:
        its view of the others' can lag (a slot served again elsewhere, not heard of yet), and taken
        for every slot, a heartbeat passed a served lease over at every beat that asked such a node,
        and a walk that reached nothing then was an outage (review51b)."""
        said = self._unserved.get(self._node(schedule_id)) if self._unserved else None
        return said[1] if said is not None and self._slot(schedule_id)[1] in said[0] else None

    def missed(self, schedule_id: str, error: Exception) -> None:
        """Record ``error`` (one of ``catches``) for ``schedule_id`` and its slot, or its node when the
        node did not answer (the node that did not answer: another's, where the schedule's master
        answered and one of its indexes' did not, ``errors.IndexNodeDown``), or every schedule when a
        node said the cluster is down or the client's own read of the map reached no node
        (``errors.whole_cluster_down``: reach62), or the walk's own read did (``_moved``: its
        ``RedisClusterUnreachableError``, edges63). Where the walk has reached nothing, raise: the
        cluster-down error (the walk's own read's, not ``error``, the master's), or ``error`` once
        ``TRIED_DOMAINS`` masters failed.
        A schedule that answered earlier in the walk (its settings read) and fails now is not reached:
        counted as answered, a claim that failed on the only schedule was no outage, an empty answer."""
        self.missing[schedule_id] = error
        self.answered.discard(schedule_id)
        down = error if whole_cluster_down(error) else self._down
        if down is not None:
            self._down = down
            if not self.reached:
                raise down
            return
        node, slot = self._node(schedule_id), self._slot(schedule_id)
        elsewhere = down_node(error)  # an index's node (a settled schedule's retire): its master answered
        node = node if elsewhere is None else ("node", elsewhere)
        whole = node is not None and (node == UNMAPPED or isinstance(error, NODE_DOWN))
        self._failed[node if whole else slot] = error
        self._masters.add(node if node is not None else slot)
        if not self.reached and len(self._masters) >= TRIED_DOMAINS:
            raise error
        target = None if whole or not not_served(error) else self._target(schedule_id)
        if target is not None and node not in self._unserved and self._asking is None:
            self._asking = (target, error)
            if self.learns:
                self.learn()

    @property
    def unasked(self) -> bool:
        """Whether a node has said a slot is not served and is not asked yet which others are."""
        return self._asking is not None

    def learn(self) -> None:
        """Ask the node that said a slot is not served which slots it knows no master for
        (``coverage.py``): once a walk for each such node, answered or not; nothing to ask, nothing
        done. One blocking call: a walk on an event loop runs it in a thread (``unreached.py``)."""
        asking, self._asking = self._asking, None
        if isinstance(self.client, RedisCluster) and asking is not None:
            node, error = asking
            self._unserved[("node", node.name)] = (unserved_slots(self.client, node) or frozenset(), error)

    def outage(self) -> Exception | None:
        """The error to raise for a walk that reached nothing and missed something; else None."""
        if self.reached or not self.missing:
            return None
        return next(iter(self.missing.values()))

    def _slot(self, schedule_id: str) -> tuple[str, int]:
        return ("slot", key_slot(keyspace.schedule_keys(schedule_id, self.prefix).meta.encode()))

    def _node(self, schedule_id: str) -> Hashable:
        """The node the client sends ``schedule_id``'s keys to; ``UNMAPPED`` on a cluster whose map
        sends them nowhere; None on a single Redis."""
        if not self._cluster:
            return None
        node = self._target(schedule_id)
        return UNMAPPED if node is None else ("node", node.name)

    def _target(self, schedule_id: str) -> ClusterNode | None:
        """The cluster node the client's map sends ``schedule_id``'s keys to; None when it has none."""
        if not isinstance(self.client, RedisCluster):
            return None
        try:
            meta = keyspace.schedule_keys(schedule_id, self.prefix).meta
            node: ClusterNode | None = self.client.get_node_from_key(meta)  # type: ignore[no-untyped-call]
        except RedisClusterException:  # its slot map short of the slot
            return None
        return node
