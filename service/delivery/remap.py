"""A Redis Cluster's slot map read again by a pass over keys when a master did not answer, so the pass
reaches a failover's new master at once rather than at its next run: the step keeper's tick
(``unanswered.Unanswered``), and a sidecar's heartbeat walk and a reaper's pass (``reach.Reach``).

The client's own path reads the map again on a connection error, but at most once a second
(redis-py's ``topology_refresh_min_interval``). While a master is down and not yet failed over, the
process's other calls on it (requests, claims) read the map about once a second, the old master still
named; a call within the second after the failover then went to the old master on every try, its
refresh not due. The keeper's keeps waited a tick (15 s: cluster52), a heartbeat's extension a beat (a
third of the lease's TTL: a lease whose master took a beat or more to fail over lapsed under a live
worker, its trajectory given to another: review52c). So the first such failure of each master in a
pass has the map read now (``NodesManager.initialize``, redis-py's public refresh, the failed master
asked last), and where the key's slot has another master in it, the key is sent once more, there.

Once a master a pass: a master down and not failed over costs a pass one read of the map, not one a
key. A read that reaches no node is the whole cluster down (``unreachable``: the caller passes the rest
over). A read a node answers but that cannot be used (nodes that disagree, slots no master serves, a
user refused ``CLUSTER SLOTS`` or its login on every node) keeps the last map, and the key its error.
A refused login is no node down: no read (each would be refused alike). The read is a blocking call:
only passes on a thread of their own make it (a walk that ``learns``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    RedisClusterException,
    RedisClusterUnreachableError,
)

from service.delivery.errors import NODE_DOWN

T = TypeVar("T")
_REFUSED = (AuthenticationError, AuthorizationError)  # ``ConnectionError``s: credentials, not a node


@dataclass
class Remap:
    """One pass's reads of the map: the masters whose failure had it read, and a read that reached no
    node (its cluster down)."""

    client: redis.Redis | RedisCluster
    unreachable: Exception | None = field(default=None, init=False)  # the error that had it read
    _read: set[str] = field(default_factory=set, init=False)  # masters whose failure read the map

    def moved(self, key: str, error: Exception) -> bool:
        """Whether ``key``'s master, which did not answer (``error``: ``NODE_DOWN``), has been replaced
        in the map read again now: the caller sends the key once more, to its new master. The first
        failure of each master in the pass reads the map; the others, and a single Redis, never."""
        client = self.client
        if not isinstance(client, RedisCluster) or not isinstance(error, NODE_DOWN):
            return False
        if isinstance(error, _REFUSED) or self.unreachable is not None:
            return False
        old = _master(client, key)
        if old is None or old in self._read:
            return False
        self._read.add(old)
        try:
            client.nodes_manager.initialize(last_failed_node_name=old)
        except RedisClusterUnreachableError:
            self.unreachable = error
            return False
        except RedisClusterException:  # nodes that disagree, slots uncovered, a refused user: map kept
            return False
        new = _master(client, key)
        return new is not None and new != old


def resent(key: str, send: Callable[[], T], moved: Callable[[str, Exception], bool]) -> T:
    """``send()``, a call on ``key``; where its master did not answer and ``moved`` says its slot has
    a new master now, once more (to that one): its error raised otherwise, for the caller to record.
    Sent again only to another master: the call on the old one did not run, or ran on a node whose
    writes the failover dropped; every call sent so is one a pass would send again at its next run."""
    try:
        return send()
    except NODE_DOWN as error:
        if not moved(key, error):
            raise
    return send()


def _master(client: RedisCluster, key: str) -> str | None:
    """The name of the master the client's map sends ``key`` to; None where it has none."""
    try:
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    except RedisClusterException:  # its slot map short of the slot
        return None
    return None if node is None else str(node.name)
