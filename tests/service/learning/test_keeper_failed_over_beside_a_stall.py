"""The step keeper reaches the new master of a stalled master's slots failed over while another master
stalls too, on a real 3-master Redis Cluster: the failover check (``coverage.named_elsewhere``) asks
the masters in the client's order, and one that does not answer is passed over for the next, which
tells the move. Taken as "nothing known to have moved", the tick stayed on the stalled old master and
the entries lapsed under their live requests (test_keeper_master_failed_over.py has the move alone).
The tick asks the master that tells the move once, then reads the map (there: the old master is read
last, and the silent one does not answer): it asked twice, the map's own ask past none of the masters
the first ask had found silent, a timeout more on the silent one (review53b)."""

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


def test_a_keeper_tick_asks_past_a_silent_master_whether_a_stalled_ones_slots_moved(
    cluster: LocalCluster,
    driven_keeper: StepKeeper,
) -> None:
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = delivery.client
    assert isinstance(client, RedisCluster)
    steps = [s for s in range(100_000) if key_slot(keys.step_planning(s).encode()) in LAST_SHARE][:2]
    old = client.get_node_from_key(keys.step_planning(steps[0])).port  # type: ignore[no-untyped-call]
    others = [node.port for node in client.get_primaries() if node.port != old]  # type: ignore[no-untyped-call]
    silent, new = others  # the check asks ``silent`` first: it does not answer, ``new`` tells the move
    stalled = {node.port: node for node in cluster.nodes}
    time.sleep(REFRESHED_S)  # its map read that long ago, as a long-lived service's was
    stalled[old].signal(signal.SIGSTOP)
    try:
        moved_around(cluster, {key_slot(keys.step_planning(s).encode()) for s in steps}, new, silent)
        fresh = Delivery(redis.RedisCluster(host="127.0.0.1", port=new, socket_timeout=TIMEOUT_S))
        for step in steps:
            fresh.enter_planning(step, "r", SHORT_MS)
        stalled[silent].signal(signal.SIGSTOP)
        try:
            ctx = cast(Context, SimpleNamespace(delivery=delivery))
            for step in steps:
                driven_keeper.hold(ctx, Entry(step, "r"), life_s=0.0)
            before = _asked(new)
            driven_keeper.tick()
            asked = _asked(new) - before  # the ask that tells the move, and the map's read
            for step in steps:
                driven_keeper.let_go(Entry(step, "r"))
        finally:
            stalled[silent].signal(signal.SIGCONT)
        seconds, micros = fresh.client.time()
        now_ms = seconds * 1000 + micros // 1000
        left = [float(fresh.client.zscore(keys.step_planning(s), "r") or 0) - now_ms for s in steps]
    finally:
        stalled[old].signal(signal.SIGCONT)
    assert min(left) > SHORT_MS
    assert asked == 2


def _asked(port: int) -> int:
    """How many ``CLUSTER SLOTS`` the master at ``port`` has answered."""
    with redis.Redis(port=port) as node:
        stats = node.info("commandstats")
    return int(stats.get("cmdstat_cluster|slots", {}).get("calls", 0))
