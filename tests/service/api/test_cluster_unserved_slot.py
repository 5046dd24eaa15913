"""A Redis Cluster slot that no master serves (lost with its master, or dropped mid-reshard): the real
condition, on a real cluster of this module's own (``CLUSTER DELSLOTS`` on every master).

The node asked answers CLUSTERDOWN (``ClusterDownError``, a ``RedisError`` the problem table did not
list), and the cluster client, its slot map rebuilt and found short, raises ``RedisClusterException``
(no ``RedisError``): each was a 500, and the second killed the reaper's thread for the life of the
replica. Both are Redis not doing it (``REDIS_FAILED``): a 503 with ``Retry-After``, a reaper pass
tried again, and the service serves the slot again once a master does.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.delivery import Delivery
from service.delivery.reaper import Reaper
from service.settings import Settings
from tests.cluster import LocalCluster, serve, serve_the_rest, unserve
from tests.service.api_helpers import batch_body
from tests.service.delivery.conftest import schedule

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take a slot away from every master."""
    with LocalCluster() as local:
        yield local


def _status_once_settled(client: TestClient, path: str, wanted: int, within_s: float = 30.0) -> int:
    """``GET path``'s status, asked again until it is ``wanted`` or ``within_s`` ran out."""
    deadline = time.monotonic() + within_s
    status = client.get(path).status_code
    while status != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        status = client.get(path).status_code
    return status


def test_a_slot_no_master_serves_is_a_503_to_retry_and_served_again_once_a_master_takes_it(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster.flushall()
    settings = Settings(redis_url=cluster.url, redis_cluster=True, model_dir=str(tmp_path))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.post("/schedule", json=batch_body(schedule_id="lost")).status_code == 200
        slot, owner = unserve(cluster, "lost")
        try:
            read = client.get("/schedule/lost")  # CLUSTERDOWN from the node asked
            again = client.post("/schedule", json=batch_body(schedule_id="lost", step=1))  # map short
        finally:
            _serve_quietly(slot, owner)
        for answer in (read, again):
            assert (answer.status_code, answer.headers.get("Retry-After")) == (503, "1"), answer.text
            assert answer.json()["type"].endswith("/redis-unavailable")
        assert {read.json()["detail"].split(":")[0], again.json()["detail"].split(":")[0]} == {
            "Redis is unreachable (ClusterDownError",
            "Redis is unreachable (RedisClusterException",
        }
        assert _status_once_settled(client, "/schedule/lost", 200) == 200


def test_the_reaper_goes_on_through_a_slot_no_master_serves(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Its passes fail while the slot is unserved (one warning) and go through once it is served."""
    cluster.flushall()
    delivery = Delivery(cluster.client())
    delivery.publish(schedule("reaped", {"a": 1}))
    slot, owner = unserve(cluster, "reaped")
    with caplog.at_level(logging.INFO, logger="service.delivery.reaper"):
        reaper = Reaper(delivery, interval_s=0.05).start()
        try:
            failed = _logged(caplog, "reaper pass failed")
            serve(slot, owner)
            recovered = _logged(caplog, "reaper passes go through again")
        finally:
            _serve_quietly(slot, owner)
            reaper.stop()
    assert (failed, recovered) == (True, True), caplog.text


def test_the_reaper_reaps_the_served_slots_while_one_slot_is_unserved(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """``cluster-require-full-coverage no``: a lapsed lease of a served slot is requeued, the
    unserved slot one warning. Before, its error (the client's ``RedisClusterException``) ended each
    pass, and a schedule due after it kept its lapsed lease running for as long; or (CLUSTERDOWN) it
    was taken for a damaged schedule, an error line each pass."""
    cluster.flushall()
    serve_the_rest(cluster)
    delivery = Delivery(cluster.client())
    for sid in ("aaa", "zzz"):  # due in that order
        delivery.publish(schedule(sid, {"a": 1}, ttl_ms=100))
        delivery.claim(sid, "a", 1)
    slot, owner = unserve(cluster, "aaa")
    with caplog.at_level(logging.INFO, logger="service.delivery.reaper"):
        reaper = Reaper(delivery, interval_s=0.05).start()
        try:
            deadline = time.monotonic() + 30
            while delivery.progress("zzz").queued == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            reaper.stop()
            _serve_quietly(slot, owner)
            _require_full_coverage(cluster)
    assert (delivery.progress("zzz").queued, delivery.progress("zzz").running) == (1, 0)
    said = sorted(
        (r.levelno, r.getMessage().split(":")[0]) for r in caplog.records if r.levelno >= logging.WARNING
    )
    assert said == [(logging.WARNING, "reaped expired leases of a"), (logging.WARNING, "reaper pass failed")]


def test_readyz_is_503_naming_the_cluster_state_while_a_slot_is_unserved_and_200_once_served(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """Every node then refuses every keyed command (CLUSTERDOWN) but answers PING: before, 200."""
    cluster.flushall()
    settings = Settings(redis_url=cluster.url, redis_cluster=True, model_dir=str(tmp_path))
    with TestClient(create_app(settings)) as client:
        assert _status_once_settled(client, "/readyz", 200) == 200
        slot, owner = unserve(cluster, "unready")
        try:
            unserved = client.get("/readyz")
        finally:
            _serve_quietly(slot, owner)
        assert unserved.status_code == 503, unserved.text
        said = unserved.json()["redis"]
        assert said.startswith("unreachable: cluster_state:fail at 127.0.0.1:"), said
        assert said.endswith(", 16383 of 16384 slots served"), said
        assert _status_once_settled(client, "/readyz", 200) == 200


def test_readyz_stays_200_while_the_cluster_serves_its_other_slots(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """``cluster-require-full-coverage no``: the schedules of the other slots are served, and every
    replica shares the cluster, so none is taken out of the load balancer for the one slot."""
    cluster.flushall()
    serve_the_rest(cluster)
    settings = Settings(redis_url=cluster.url, redis_cluster=True, model_dir=str(tmp_path))
    try:
        with TestClient(create_app(settings)) as client:
            assert _status_once_settled(client, "/readyz", 200) == 200
            slot, owner = unserve(cluster, "partly")
            try:
                partly = client.get("/readyz")
            finally:
                _serve_quietly(slot, owner)
    finally:
        _require_full_coverage(cluster)
    assert (partly.status_code, partly.json()["redis"]) == (200, "ok")


def test_readyz_goes_by_ping_alone_for_a_user_not_allowed_cluster_info(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A least-privilege user without ``cluster|info``: not told the state, ready as PING says, not
    503 for ever (the refusal is no outage)."""
    cluster.flushall()
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as admin:
            admin.acl_setuser(
                "noinfo", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-cluster|info"]
            )
    url = cluster.url.replace("redis://", "redis://noinfo:pw@")
    settings = Settings(redis_url=url, redis_cluster=True, model_dir=str(tmp_path))
    try:
        with TestClient(create_app(settings)) as client:
            assert _status_once_settled(client, "/readyz", 200) == 200
            slot, owner = unserve(cluster, "noinfo")
            try:
                answer = client.get("/readyz")
            finally:
                _serve_quietly(slot, owner)
    finally:
        for node in cluster.nodes:
            with redis.Redis(port=node.port) as admin:
                admin.acl_deluser("noinfo")
    assert (answer.status_code, answer.json()["redis"]) == (200, "ok")


def _require_full_coverage(cluster: LocalCluster) -> None:
    """The default back: one slot unserved, every node refuses every keyed command."""
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            client.config_set("cluster-require-full-coverage", "yes")


def _logged(caplog: pytest.LogCaptureFixture, line: str, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if any(r.getMessage().startswith(line) for r in caplog.records):
            return True
        time.sleep(0.05)
    return False


def _serve_quietly(slot: int, owner: int) -> None:
    """The slot served again (the test's own ``serve`` may not have been reached); served already: fine."""
    with contextlib.suppress(redis.ResponseError):  # "Slot ... is already busy"
        serve(slot, owner)
