"""The sidecar's last act before it exits: close every Redis connection, those still in use too, and
refuse every call made after it.

Why. The sidecar's Redis calls run in worker threads (``asyncio.to_thread``), and a shutdown that
stops waiting for one (a release or claim abandoned at the drain's end, a report cut short, a heartbeat
cancelled) does not end the call: its thread reads the socket until the server answers or the
client's socket timeout (5 s) runs out. ``asyncio.run`` joins those threads before it returns, so with
Redis stalled (paused, or SIGSTOPped: connections accepted, nothing answered) the process exited up
to one socket timeout past the drain timeout plus the release grace that docs/sidecar.md promises.
Closed here, each such call fails at once (a ``ConnectionError`` nobody waits for any more), and
what it did not do is left to the reapers: its leases lapse and are requeued.

Closing alone ended only the calls waiting when it ran. A call made after it opened a new connection,
which a stalled server accepts and never answers, and waited out a socket timeout all the same: a
thread's second call once its first was answered (the retire of a schedule its report settled, a
script loaded after NOSCRIPT, the version check a waiter asked again), a call that had taken its
connection from the pool but not yet sent, and in cluster mode every call the hang-up ended, as the
cluster client answers a dropped connection by asking the nodes for the slot map again on new ones.
So the client's connections refuse from now on: each call, on a pooled connection or a new one,
raises ``HungUpError`` unsent, at once. It is no ``ConnectionError``: nothing retries it as an outage.
The refusal rests on redis-py's public ``connection_class`` (``service/delivery/hangable.py``): a
client not built there cannot be hung up, and ``hang_up`` says so (``TypeError``) rather than close
it and let later calls wait.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import redis
from redis.cluster import ClusterNode, RedisCluster

from service.delivery.hangable import HungUpError, Refusing
from service.delivery.protocol import Delivery

__all__ = ["HungUpError", "hang_up"]


def hang_up(delivery: Delivery) -> None:
    """Refuse every later call of ``delivery``'s client (``HungUpError``), then close its connections,
    those in use too: a call still waiting on the server fails now instead of at its socket timeout.
    Push mode calls it once its drain is over (``launch``), pull mode once its API's lifespan has
    handed back what the worker held (``pull_api``): nothing the drain promises to send is sent after
    it. ``TypeError`` for a client not built by ``service.delivery.hangable``."""
    client = delivery.client
    pools = list(_pools(client))
    for kind in refusing_classes(pools):
        kind.refuse_from_now()  # first: a connection the close below does not reach refuses too
    for pool in pools:
        pool.disconnect(inuse_connections=True)
    # The client itself stays open: a closed cluster client forgets its default node, and a later
    # call failed with its RedisClusterException (no RedisError) before it reached a connection.


def refusing_classes(pools: list[redis.ConnectionPool]) -> set[type[Refusing]]:
    """The connection classes of ``pools``; ``TypeError`` naming one that cannot refuse (the client
    was not built by ``service.delivery.hangable``), as a hang-up that only closed would let every
    later call wait on a stalled server."""
    kinds: set[type[Refusing]] = set()
    for pool in pools:
        kind = pool.connection_class
        if not issubclass(kind, Refusing):
            raise TypeError(
                f"connection_class={kind.__module__}.{kind.__qualname__}: the client cannot be hung up;"
                " build it with service.delivery.hangable.hangable"
            )
        kinds.add(kind)
    return kinds


def _pools(client: redis.Redis | RedisCluster) -> Iterator[redis.ConnectionPool]:
    """The connection pools of ``client``: its own, or each cluster node's."""
    if isinstance(client, RedisCluster):
        for node in cast(list[ClusterNode], client.get_nodes()):  # type: ignore[no-untyped-call]
            yield client.get_redis_connection(node).connection_pool
    else:
        yield client.connection_pool
