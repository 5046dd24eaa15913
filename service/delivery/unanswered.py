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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from service.delivery.errors import NODE_DOWN, cluster_down

SERVER = "server"  # a single Redis: the one master of every key


@dataclass
class Unanswered:
    """One pass's masters that did not answer (node name -> the error), and a cluster said down."""

    client: redis.Redis | RedisCluster  # ``calls.RedisClient``, which imports this module's users
    _nodes: dict[str, Exception] = field(default_factory=dict, init=False)
    _every: Exception | None = field(default=None, init=False)

    def known(self, key: str) -> Exception | None:
        """The error ``key``'s master failed with earlier in this pass: don't ask; None: ask it."""
        if self._every is not None:
            return self._every
        if not self._nodes:
            return None
        node = self.master(key)
        return None if node is None else self._nodes.get(node)

    def met(self, key: str, error: Exception) -> None:
        """A call on ``key`` failed with ``error``: where that is its master not answering, or the
        cluster down, the rest of the pass passes them over."""
        if cluster_down(error):
            self._every = error
        elif isinstance(error, NODE_DOWN) and (node := self.master(key)) is not None:
            self._nodes[node] = error

    def master(self, key: str) -> str | None:
        """The name of the master the client sends ``key`` to; None where its map has none."""
        if not isinstance(self.client, RedisCluster):
            return SERVER
        try:
            node = self.client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        except RedisClusterException:  # its slot map short of the slot
            return None
        return None if node is None else str(node.name)
