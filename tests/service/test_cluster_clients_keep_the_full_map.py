"""Every Redis Cluster client the service and its sidecars build keeps its last full slot map through
an outage of a slot range (redis-py's ``require_full_coverage``, its default), on a real cluster.

A client built with ``require_full_coverage=False`` takes a map read during the outage, the dropped
range left out: its keys have no master in the client's map, and ``reach.py``, ``unanswered.py`` and
``coverage.py`` rest on the map still naming the range's master (a node's "not served" is that master's
word, asked once a pass). So no client in ``service/`` is built so: the builders are found on the
syntax tree (every ``RedisCluster(...)`` or ``RedisCluster.from_url(...)``), none passes the option,
and each way the code builds one (the service's ``connect``, ``Delivery.from_url``, a sidecar's
``connected``) is run through a dropped range and its return.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from service.delivery import Delivery, keys
from service.redis_conn import RedisClient, connect
from service.settings import Settings
from service.sidecar.launch import SidecarOptions
from service.sidecar.launch import connect as sidecar_connect
from tests.cluster import SLOTS, LocalCluster, partly_served, serve_ranges, unserve_range

pytestmark = pytest.mark.slow
SERVICE = Path(__file__).resolve().parents[2] / "service"
BUILDERS = {("redis_conn.py", "connect"), ("delivery/hangable.py", "hangable_cluster")}
DROPPED = range(SLOTS // 3 + 1, 2 * SLOTS // 3)  # the second master's share (``valkey-cli --cluster create``)


def _cluster_builds() -> set[tuple[str, str]]:
    """(module, function) of every call in ``service/`` that builds a ``RedisCluster``."""
    found: set[tuple[str, str]] = set()
    for path in SERVICE.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and _builds_cluster(call.func):
                    found.add((path.relative_to(SERVICE).as_posix(), function.name))
    return found


def _builds_cluster(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "RedisCluster"
    return isinstance(func, ast.Attribute) and ast.unparse(func) in (
        "RedisCluster.from_url",
        "redis.RedisCluster",
    )


def test_the_cluster_clients_are_built_in_two_places_and_neither_drops_coverage() -> None:
    assert _cluster_builds() == BUILDERS
    given = [
        path.name
        for path in SERVICE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.keyword) and node.arg == "require_full_coverage"
    ]
    assert given == []


def _service(url: str) -> RedisClient:
    return connect(Settings(redis_url=url, redis_cluster=True))


def _delivery(url: str) -> RedisClient:
    return Delivery.from_url(url, cluster=True).client


def _sidecar(url: str) -> RedisClient:
    return sidecar_connect(SidecarOptions(worker_id="w0", redis_url=url, cluster=True)).client


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with partly_served() as local:
        yield local


@pytest.mark.parametrize("build", [_service, _delivery, _sidecar], ids=["service", "delivery", "sidecar"])
def test_a_client_keeps_a_dropped_ranges_master_and_answers_once_it_is_served_again(
    cluster: LocalCluster, build: Callable[[str], RedisClient]
) -> None:
    client = build(cluster.url)
    assert isinstance(client, RedisCluster)
    key = next(
        keys.step_planning(n) for n in range(10_000) if key_slot(keys.step_planning(n).encode()) in DROPPED
    )
    owner = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    unserve_range(cluster, DROPPED)
    try:
        with pytest.raises(RedisClusterException, match="not covered"):  # the map read during the outage
            client.nodes_manager.initialize()
        kept = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    finally:
        serve_ranges(cluster, {DROPPED: owner.port})
    try:
        assert kept.name == owner.name
        assert client.set(key, "v")
        assert client.get(key) == "v"
    finally:
        client.delete(key)
        client.close()
