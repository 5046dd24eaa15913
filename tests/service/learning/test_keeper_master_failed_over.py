"""The step keeper's tick reaches the new master of a stalled master's slots once they are failed over,
on a real 3-master Redis Cluster: the stalled master (SIGSTOPped: it accepts and does not answer)
stays in the client's map, and a master's pipeline runs on that node's own client, which never re-reads
the map.

Before (review51b, docs/experiments.md), a tick's pipeline timed out on the old master, nothing was
sent again, and the next ticks did the same: the entries lapsed under their live requests until some
other call on the client's path re-read the map. Now a timed-out master's slot is checked with another
master (one ``CLUSTER SLOTS``), and where it has moved the steps go on the client's path, which
re-reads the map and reaches the new master. ``LocalCluster`` has no replicas: the failover is the
slots given to another master (``CLUSTER SETSLOT ... NODE``, its epoch bumped), as a replica's
promotion gives them."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.context import Context
from service.delivery import Delivery, keys
from service.pipeline.step_keeper import Entry, StepKeeper
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import LAST_SHARE, REFRESHED_S, TIMEOUT_S, moved_around
from tests.service.learning.keeper_held import SHORT_MS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its test moves a stalled master's slots for good."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def test_a_keeper_tick_keeps_the_entries_of_a_stalled_master_failed_over(
    cluster: LocalCluster, driven_keeper: StepKeeper
) -> None:
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = delivery.client
    assert isinstance(client, RedisCluster)
    steps = [s for s in range(100_000) if key_slot(keys.step_planning(s).encode()) in LAST_SHARE][:2]
    old = client.get_node_from_key(keys.step_planning(steps[0])).port  # type: ignore[no-untyped-call]
    stalled = next(node for node in cluster.nodes if node.port == old)
    new = next(node.port for node in cluster.nodes if node.port != old)
    live = next(node.port for node in cluster.nodes if node.port not in (old, new))
    time.sleep(REFRESHED_S)  # its map read that long ago, as a long-lived service's was
    stalled.signal(signal.SIGSTOP)
    try:
        moved_around(cluster, {key_slot(keys.step_planning(s).encode()) for s in steps}, new, live)
        fresh = Delivery(
            redis.RedisCluster(host="127.0.0.1", port=live, socket_timeout=TIMEOUT_S)
        )  # the new master's entries, as requests wrote them
        for step in steps:
            fresh.enter_planning(step, "r", SHORT_MS)
        ctx = cast(Context, SimpleNamespace(delivery=delivery))
        for step in steps:
            driven_keeper.hold(ctx, Entry(step, "r"), life_s=0.0)
        driven_keeper.tick()
        for step in steps:
            driven_keeper.let_go(Entry(step, "r"))
        seconds, micros = fresh.client.time()
        now_ms = seconds * 1000 + micros // 1000
        left = [float(fresh.client.zscore(keys.step_planning(s), "r") or 0) - now_ms for s in steps]
    finally:
        stalled.signal(signal.SIGCONT)
    assert min(left) > SHORT_MS
