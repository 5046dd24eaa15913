"""The masters that did not answer in one pass of calls (the step keeper's tick: ``indexes.keep_planning``'s
pipeline per master on a cluster, ``step_keeper``'s in-flight marks each on its own), so that pass pays
for a stalled or dead master once, not once per key of it.

A master stalled (SIGSTOPped, a long fork, swapping: it accepts and does not answer) costs each call
its socket timeout three times over (the service's client retries twice: ``retries.short_retry``), a
dead one its refused connection and the retries' waits (0.12 s). Measured with 4 steps' entries and 4
marks on a stalled master (helper cluster50): a keeper tick took 28 s at the service's 1 s timeout, past
the 15 s between ticks, and the live masters' keys behind them waited that long.

So the first ``NODE_DOWN`` error on a master (``ConnectionError``, ``TimeoutError``) is that master's
outage for the rest of the pass: every later key the client's map sends to it fails with that error,
unasked, and is tried again at the next pass (a failover meanwhile moves its slots, and the map with
them: a key whose slot moved is asked of its new master). On a single Redis the server is every key's
master. A node's "The cluster is down" (``errors.cluster_down``) is every key's too. Any other error is
its own key's alone: a master out of memory answers at once, and a key of the wrong type is that key's
(reach49). This is not ``reach.Reach``'s walk: the keeper never gives a pass up as an outage, since
each master costs it one failed call at most and any key it skipped would lapse under its live request.

A slot no master serves is one slot's, not its master's, but costs each call on it 0.26 s (redis-py's
fixed wait on "Hash slot not served": ``coverage.py``): so, as ``Reach`` does, the node that has just
said so is asked once a pass which slots it knows no master for, and every later key of those slots
that the client sends to that node fails with that refusal, unasked (cluster51; before, each step
and mark of such a slot paid the wait at every tick). Its own slots only: its view of the others'
can lag (a slot served again elsewhere, not heard of yet), and taken for every slot, it let the other
masters' entries and marks lapse under their live requests (review51b).

A master that did not answer may have been failed over, its slots now another master's, which the
client's paced refresh has not seen yet: the first such failure of each master in a pass asks another
master for the slot's, and reads the map again where it names another (``remap.py``: cluster52,
shared with the sidecar's walks since review52c; the ask, cluster53); where the key's slot now has
another master, the caller sends it once more (``sent``). A master silent to that ask is passed over
for the rest of the pass as one whose call failed (``met_master``). A read that no node answers is
the whole cluster's outage, so the rest of the pass asks nothing (a cluster down costs a tick one read):
the pass's own, or the client's own on a retry, which then raises ``RedisClusterUnreachableError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from service.delivery.coverage import unserved_slots
from service.delivery.errors import NODE_DOWN, not_served, whole_cluster_down
from service.delivery.remap import Remap, resent

T = TypeVar("T")
SERVER = "server"  # a single Redis: the one master of every key


@dataclass
class Unanswered:
    """One pass's masters that did not answer (node name -> the error), and a cluster said down."""

    client: redis.Redis | RedisCluster  # ``calls.RedisClient``, which imports this module's users
    _nodes: dict[str, Exception] = field(default_factory=dict, init=False)
    _every: Exception | None = field(default=None, init=False)
    # master name -> the slots it said no master serves, and its refusal that had it asked
    _unserved: dict[str, tuple[frozenset[int], Exception]] = field(default_factory=dict, init=False)
    _remap: Remap = field(init=False)  # the map read again after a master's failure (``remap.py``)

    def __post_init__(self) -> None:
        self._remap = Remap(self.client, self.met_master)  # a master silent to its ask: passed over

    def known(self, key: str) -> Exception | None:
        """The error ``key``'s master, or its slot, failed with earlier in this pass: don't ask; None:
        ask it."""
        if self._every is not None:
            return self._every
        if not self._nodes and not self._unserved:
            return None
        node = self.master(key)
        if node is None:
            return None
        said = self._unserved.get(node)  # its master's word on its own slots only (review51b)
        if said is not None and key_slot(key.encode()) in said[0]:
            return said[1]
        return self._nodes.get(node)

    def met(self, key: str, error: Exception) -> None:
        """A call on ``key`` failed with ``error``: where that is its master not answering, or the
        cluster down, the rest of the pass passes them over; where a node said its slot is not served,
        that node is asked which others are (once a pass), and those the client sends to it are passed
        over: a node's view of the others' slots can lag (one served again elsewhere, not heard of
        yet), and taken for every slot, it let the other masters' keys lapse (review51b). The client's
        own read of the map reaching no node (``RedisClusterUnreachableError``, which its retry raises
        in place of the master's ``ConnectionError``) is the cluster down, as the pass's own read is
        (``remapped``): taken for its key's alone, every other key was asked and failed the same, where
        the client's refresh was due, at every tick in production (flaky62)."""
        if whole_cluster_down(error):
            self._every = error
        elif isinstance(error, NODE_DOWN) and (node := self.master(key)) is not None:
            self._nodes[node] = error
        elif not_served(error) and isinstance(self.client, RedisCluster):
            said = self._node(key)
            if said is not None and said.name not in self._unserved:
                self._unserved[str(said.name)] = (unserved_slots(self.client, said) or frozenset(), error)

    def sent(self, key: str, send: Callable[[], T]) -> T:
        """``send()``, a call on ``key``; where its master did not answer and ``remapped`` finds its slot
        failed over, once more (to the new master): its error raised otherwise, for the caller's
        ``met``."""
        return resent(key, send, self.remapped)

    def remapped(self, key: str, error: Exception) -> bool:
        """Whether ``key``'s master, which did not answer (``error``: ``NODE_DOWN``), has been replaced
        in the map read again now (``remap.Remap.moved``: once a master a pass): the caller sends the
        key once more, to its new master. A read that reaches no node is the cluster down: the rest of
        the pass passes every key over with ``error``."""
        moved = self._remap.moved(key, error)
        if self._remap.unreachable is not None:
            self._every = self._remap.unreachable
        return moved

    def met_master(self, node: ClusterNode, error: Exception) -> None:
        """A call to ``node`` itself (not to a key's master) failed with ``error``: where that is its
        not answering, the rest of the pass passes it over, as ``met`` does for a key's master."""
        if isinstance(error, NODE_DOWN):
            self._nodes[str(node.name)] = error

    def master(self, key: str) -> str | None:
        """The name of the master the client sends ``key`` to; None where its map has none."""
        if not isinstance(self.client, RedisCluster):
            return SERVER
        node = self._node(key)
        return None if node is None else str(node.name)

    def _node(self, key: str) -> ClusterNode | None:
        """The cluster node the client's map sends ``key`` to; None on a single Redis, or where the
        map has none."""
        if not isinstance(self.client, RedisCluster):
            return None
        try:
            node: ClusterNode | None = self.client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        except RedisClusterException:  # its slot map short of the slot
            return None
        return node
