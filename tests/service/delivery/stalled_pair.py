"""A real 3-master Redis Cluster with its first two masters stalled, for the tests of a master that does
not answer (SIGSTOPped: it accepts and does not answer), where a stalled master is met before any
failover names another for its slots.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from redis.cluster import RedisCluster

from service.delivery import Delivery, keys
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import SLOTS, LocalCluster, serve_the_rest, slot_of
from tests.service.failover import TIMEOUT_S, answering, paced

SHARES = (range(0, SLOTS // 3), range(SLOTS // 3 + 1, 2 * SLOTS // 3))  # the first two masters'


@contextmanager
def two_stalled_masters() -> Iterator[tuple[RedisCluster, list[str]]]:
    """The service's client (its own refresh paced: ``paced``) on a cluster of its own whose first two
    masters are stalled, and a schedule id on each of them; the masters go on at the end. The live
    master is waited on for its answer (``answering``): only a stalled one's timeout is the test's."""
    with LocalCluster() as local:
        serve_the_rest(local)
        client = paced(
            Delivery(connect(Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)))
        )
        on = [next(f"s{n}" for n in range(100_000) if slot_of(f"s{n}") in share) for share in SHARES]
        ports = {client.get_node_from_key(keys.schedule_keys(sid).meta).port for sid in on}  # type: ignore[no-untyped-call]
        stalled = [node for node in local.nodes if node.port in ports]
        for node in stalled:
            node.signal(signal.SIGSTOP)
        answering(client, *(node.name for node in client.get_primaries() if node.port not in ports))  # type: ignore[no-untyped-call]
        try:
            yield client, on
        finally:
            for node in stalled:
                node.signal(signal.SIGCONT)
            client.close()
