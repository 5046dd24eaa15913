"""A walk over schedules (a heartbeat, a claim's) on a real 3-master Redis Cluster whose every master's
process is gone, where the client's own refresh of its map is due (as every beat in production, the
last read a second or more before): that refresh reaches no node, and the client raises
``RedisClusterUnreachableError`` in place of the master's ``ConnectionError``. That is the whole
cluster down, as a node's "The cluster is down" is: the walk that has reached nothing raises it at its
first schedule. Before, ``Reach.missed`` took it for its schedule's slot alone, so every other schedule
of the first master was asked (each failing the same) until a second master's failed: five calls for
one here (reach62; the step keeper's pass had the same gap, flaky62)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterUnreachableError

from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.records import Lease
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import LocalCluster, commands_sent, serve_the_rest
from tests.scripts_sent import Calls, count_scripts
from tests.service.failover import TIMEOUT_S
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
ON_FIRST = 4  # schedules on the first master, each its own slot, walked before another master's


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills every master."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def _leases(delivery: Delivery) -> list[Lease]:
    """One lease on each of ``ON_FIRST`` schedules of one master (distinct slots), then one of another."""
    client = delivery.client
    first: int | None = None
    ids: list[str] = []
    other: str | None = None
    for n in range(10_000):
        sid = f"u{n}"
        port = client.get_node_from_key(delivery.keys(sid).meta).port  # type: ignore[union-attr]
        first = port if first is None else first
        if port == first and len(ids) < ON_FIRST:
            ids.append(sid)
        elif port != first and other is None:
            other = sid
        if len(ids) == ON_FIRST and other is not None:
            break
    leases: list[Lease] = []
    for sid in [*ids, str(other)]:
        publish(delivery, sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=30_000)
        leases += delivery.claim(sid, "w", 1)
    return leases


@pytest.mark.parametrize("learns", [True, False], ids=["learns", "does not learn"])
def test_a_walk_on_a_cluster_wholly_down_raises_at_its_first_schedule(
    cluster: LocalCluster, learns: bool
) -> None:
    sent, reach = _walk_on_a_dead_cluster(cluster, learns, refresh_due=True)
    assert len(sent) == 1  # the first schedule's beat; the rest passed over, unasked
    assert not reach.reached


def test_a_learning_walk_whose_own_read_of_the_map_reaches_no_node_raises_at_its_first_schedule(
    cluster: LocalCluster,
) -> None:
    """The client's map read just now (its own refresh not due, as within a second of its last): the
    first beat fails with its master's ``ConnectionError``, and the walk's own read of the map
    (``remap.Remap.moved``) reaches no node. That is the cluster down as the client's read reaching
    none is: the walk raises ``RedisClusterUnreachableError`` at its first schedule. Before, the read
    was kept as the master's ``ConnectionError``, which ``Reach.missed`` took for one master's: the
    walk passed the rest over and returned, its outage left to the caller's ``Reach.outage`` (edges63)."""
    sent, reach = _walk_on_a_dead_cluster(cluster, True, refresh_due=False)
    assert len(sent) == 1
    assert not reach.reached


def test_a_sidecars_claim_on_a_cluster_wholly_down_sends_one_call(cluster: LocalCluster) -> None:
    """The sidecar's claim walk (``WorkerSession.claim``: a ``Reach`` that does not learn), its client's
    map read just now: its first call is the read of the worker's inbox, whose master's
    ``ConnectionError`` is one master's, not yet the cluster's: the claim walks the schedules it knows
    (``service/sidecar/inbox.py``, inbox64: with that one master down, every claim of the worker raised
    while its schedules on the others answered), one script a master, and raises once two masters failed
    (``Reach``'s outage): the first of the first master's four, the other master's one. Before inbox64
    it raised the inbox's error, no schedule asked (edges64). The two scripts edges63 counted for a walk
    that does not learn were ``heartbeat_reaching``'s (the ``does not learn`` case above), which no
    sidecar walks so: its heartbeats learn (edges64)."""
    delivery = _delivery(cluster)
    for lease in _leases(delivery):  # each schedule's one item back in its queue
        delivery.release([lease])
    session = WorkerSession(delivery, Holdings(8), SessionSettings("w"))
    assert len(asyncio.run(session.schedules())) == ON_FIRST + 1
    client = delivery.client
    client.nodes_manager.initialize()  # type: ignore[union-attr]
    for node in cluster.nodes:
        node.kill()
    asked = commands_sent(client)
    try:
        with pytest.raises(redis.ConnectionError):
            asyncio.run(session.claim(8))
    finally:
        client.close()
    assert asked == ["ZRANGE", "EVALSHA", "EVALSHA"]


def test_a_walk_that_reached_some_passes_every_schedule_over_after_it(cluster_client: RedisCluster) -> None:
    """Having reached a schedule, the walk raises nothing, and passes every later one over with the
    error, its master's or not: before, each was asked, one failed call per slot."""
    reach = Reach(cluster_client)
    reach.got("done")
    error = RedisClusterUnreachableError("no node answers")
    reach.missed("s0", error)
    assert all(reach.passed_over(f"s{n}") for n in range(1, 20))
    assert set(reach.missing.values()) == {error}


def _walk_on_a_dead_cluster(cluster: LocalCluster, learns: bool, refresh_due: bool) -> tuple[Calls, Reach]:
    """A heartbeat walk (``learns``) or a claim's over ``_leases`` after every master is killed, which
    must raise ``RedisClusterUnreachableError``: the scripts it sent, and its ``Reach``. With
    ``refresh_due`` the client's own map refresh is due at the first failure (production's beat);
    without, the client read its map just now, so only the walk's own read (``Remap.moved``) meets
    the dead cluster."""
    delivery = _delivery(cluster)
    leases = _leases(delivery)
    client = delivery.client
    nodes = client.nodes_manager  # type: ignore[union-attr]
    nodes._topology_refresh_min_interval = 0.0 if refresh_due else 3600.0
    if not refresh_due:
        nodes.initialize()
    for node in cluster.nodes:
        node.kill()
    sent = count_scripts(client)
    reach = Reach(client, delivery.prefix, learns=learns)
    try:
        with pytest.raises(RedisClusterUnreachableError):
            delivery.heartbeat_reaching(leases, None, reach)
    finally:
        client.close()
    return sent, reach


def _delivery(cluster: LocalCluster) -> Delivery:
    """The service's client on ``cluster`` at the tests' short timeout, its map refresh paced to once
    an hour: as within a second of its last read, so only what the walk does itself reads the map."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    delivery.client.nodes_manager._topology_refresh_min_interval = 3600.0  # type: ignore[union-attr]
    return delivery
