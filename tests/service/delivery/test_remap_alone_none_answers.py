"""A call of its own (a sidecar's claim, completion or failure report: ``remap.remapped``) whose master
did not answer, on a cluster none of whose other masters answers either, reads no map: a cluster down
is its own retries' to find, on a real 3-master Redis Cluster with every master killed.

Why. A call of its own is retried by its caller (a report at 50 ms doubling, a claim at the next claim),
and an outage meets every report in flight at once: a read of the map for each, through every node of a
cluster that answers nothing, was a pass over the cluster's nodes per report per retry, to learn
nothing the retry would not. A pass (a walk, a keeper's tick) does read it: it learns the cluster down
there and passes its other keys over (``test_keeper_failover_fresh_map``). The reads are the client's
``NodesManager.initialize`` calls, counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery, keys, remap
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import TIMEOUT_S, paced

pytestmark = pytest.mark.slow


@pytest.fixture
def all_dead() -> Iterator[RedisCluster]:
    """The service's client (its own refresh paced: ``paced``) on a cluster of the test's own whose
    every master has been killed after the client read its map."""
    with LocalCluster() as local:
        serve_the_rest(local)
        client = paced(
            Delivery(connect(Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)))
        )
        for node in local.nodes:
            node.kill()
        try:
            yield client
        finally:
            client.close()


def test_a_call_of_its_own_on_a_cluster_that_answers_nowhere_reads_no_map(
    all_dead: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = all_dead
    manager = client.nodes_manager
    reads: list[dict[str, Any]] = []
    initialize = manager.initialize

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs)
        return initialize(*args, **kwargs)

    monkeypatch.setattr(manager, "initialize", counted)
    monkeypatch.setattr(remap, "RECENT_S", 0.0)  # each call may ask: none shares another's
    key = keys.schedule_keys("s0").meta
    for _ in range(3):
        with pytest.raises(redis.ConnectionError):
            remap.remapped(client, key, lambda: client.get(key))
    assert [read for read in reads if "last_failed_node_name" in read] == []
