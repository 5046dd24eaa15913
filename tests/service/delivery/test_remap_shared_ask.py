"""Calls of their own on one client (a sidecar's claims and reports: ``remap.remapped``) whose master
does not answer share one ask of another master about it (its ``CLUSTER SLOTS``) in ``RECENT_S``, on a
real 3-master Redis Cluster with one master killed and not failed over.

An outage meets every report in flight at once (32 a sidecar), each retrying every 50 ms to 2 s: one
ask each made the live masters answer a ``CLUSTER SLOTS`` per report per retry for a map that had not
changed. A call that shares an ask raises its master's error, for its caller's retry, which goes to
the new master once an ask has found one and had the map read (``test_reports_failover_fresh_map``).
The asks are counted by the live masters themselves (``INFO commandstats``); ``RECENT_S`` is stretched
to an hour so that a loaded host's pauses cannot split the calls between two windows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery, keys, remap
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import TIMEOUT_S, answering, map_reads, paced

pytestmark = pytest.mark.slow
CALLS = 5  # reports in flight on the dead master


@pytest.fixture
def one_dead(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[RedisCluster], str, list[int]]]:
    """Two of the service's clients on a cluster of the test's own, then one master killed (its slots
    served by no one), a key on that master, and the live masters' ports; one share window a test."""
    monkeypatch.setattr(remap, "RECENT_S", 3600.0)
    with LocalCluster() as local:
        serve_the_rest(local)
        clients = [_client(local) for _ in range(2)]
        key = keys.schedule_keys("s0").meta
        port = clients[0].get_node_from_key(key).port  # type: ignore[no-untyped-call]
        next(node for node in local.nodes if node.port == port).kill()
        live = [node.port for node in local.nodes if node.port != port]
        for client in clients:  # a live master's ask waited for: a late answer is no silence
            answering(client, *(node.name for node in client.get_primaries() if node.port in live))  # type: ignore[no-untyped-call]
        try:
            yield clients, key, live
        finally:
            for client in clients:
                client.close()


def test_calls_on_one_client_share_one_ask_of_another_master(
    one_dead: tuple[list[RedisCluster], str, list[int]],
) -> None:
    [client, _], key, live = one_dead
    before = map_reads(live)
    for _ in range(CALLS):
        with pytest.raises(redis.ConnectionError):
            remap.remapped(client, key, lambda: client.get(key))
    assert map_reads(live) - before == 1


def test_another_clients_calls_ask_for_themselves(
    one_dead: tuple[list[RedisCluster], str, list[int]],
) -> None:
    clients, key, live = one_dead
    before = map_reads(live)
    for client in clients:
        with pytest.raises(redis.ConnectionError):
            remap.remapped(client, key, lambda: client.get(key))  # noqa: B023 (called at once)
    assert map_reads(live) - before == 2


def _client(local: LocalCluster) -> RedisCluster:
    """The service's cluster client at a short timeout, its own refresh of the map paced (``paced``):
    the only ``CLUSTER SLOTS`` after its first read are the asks."""
    settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
    return paced(Delivery(connect(settings)))
