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
So the client's connection pools refuse from now on: each call, on a pooled connection or a new one,
raises ``HungUpError`` unsent, at once. It is no ``ConnectionError``: nothing retries it as an outage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn, cast

import redis
from redis.cluster import RedisCluster

from service.delivery.protocol import Delivery


class HungUpError(redis.RedisError):
    """A Redis call made after the sidecar hung up at its shutdown: refused unsent, at once."""

    def __init__(self) -> None:
        super().__init__(
            "the sidecar hung up Redis at its shutdown (service/sidecar/hang_up.py): this call was not"
            " sent; what it would have done is left to the reapers (its leases lapse and are requeued)"
        )


def hang_up(delivery: Delivery) -> None:
    """Refuse every later call of ``delivery``'s client (``HungUpError``), then close its connections: a
    call still waiting on the server fails now instead of at its socket timeout. Push mode calls it
    once its drain is over (``launch``), pull mode once its API's lifespan has handed back what the
    worker held (``pull_api``): nothing the drain promises to send is sent after it."""
    client = delivery.client
    if isinstance(client, RedisCluster):  # no command routed (closed, it would fail on the lost default
        _refuse(client, "execute_command")  # node), no slot map asked again, no node client made for one
        _refuse(client.nodes_manager, "initialize")
    for pool in _pools(client):
        _refuse_pool(pool)
    client.close()


def _pools(client: redis.Redis | RedisCluster) -> Iterator[Any]:
    """The connection pools of ``client``: its own, or each cluster node's."""
    if isinstance(client, RedisCluster):
        for node in cast(Any, client).get_nodes():  # untyped in redis-py
            if node.redis_connection is not None:
                yield node.redis_connection.connection_pool
    else:
        yield client.connection_pool


def _refuse_pool(pool: Any) -> None:
    """Refuse every connection ``pool`` would hand out from now on, and every (re)connect of one it
    handed out already, then close them all. The pool's lock is taken once new connections are
    refused: a thread inside ``get_connection`` then holds one of those listed here, refused too."""
    _refuse(pool, "get_connection")
    _refuse(pool, "make_connection")
    kept = ("_available_connections", "_in_use_connections", "_connections")  # the last: a blocking pool's
    with getattr(pool, "_lock", None) or contextlib.nullcontext():
        connections = [c for name in kept for c in getattr(pool, name, ()) if c is not None]
    for connection in connections:
        _refuse(connection, "connect_check_health")  # what ``connect`` and a send on a closed one call
    for connection in connections:
        connection.disconnect()


def _refuse(target: object, method: str) -> None:
    """Make ``target.method`` raise ``HungUpError`` (this instance only; none other shares it)."""

    def refused(*_args: object, **_kwargs: object) -> NoReturn:
        raise HungUpError()

    setattr(target, method, refused)
