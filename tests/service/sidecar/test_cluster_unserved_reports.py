"""A push sidecar's reports on a real Redis Cluster whose schedule slot no master serves for a while
(``CLUSTER DELSLOTS`` on every master, as ``tests/service/api/test_cluster_unserved_slot.py``).

The node asked answers ``CLUSTERDOWN``, and the cluster client, its slot map rebuilt and found short,
raises a bare ``RedisClusterException``: neither was ``TRANSIENT`` (``outage_retry.py``), so the
completion went up at once, unretried, and a heartbeat raised it every beat. Now the report rides it
out as it does an outage, and lands once a master serves the slot again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from service.delivery import Delivery
from service.delivery.outcomes import CompletionOutcome
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import LocalCluster, serve, unserve
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
RETRYING = "redis unavailable during complete"  # the session's warning on a completion's first failure


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take a slot away from every master."""
    with LocalCluster() as local:
        yield local


def test_a_push_completion_rides_out_a_slot_no_master_serves_and_is_accepted_once(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.flushall()
    publish(Delivery(cluster.client()), "lost", {"w": [item("p", 0, 5)]}, lease_ttl_ms=600_000)
    session = WorkerSession(Delivery(cluster.client()), Holdings(1), SessionSettings("w", retry_for_s=600))
    (held,) = asyncio.run(session.claim(1))
    slot, owner = unserve(cluster, "lost")

    async def complete_across_it() -> CompletionOutcome:
        completing = asyncio.create_task(session.complete(held, RESULT))
        while RETRYING not in caplog.text and not completing.done():  # its first try met it
            await asyncio.sleep(0.01)
        await asyncio.to_thread(serve, slot, owner)
        return await completing

    try:
        with caplog.at_level(logging.WARNING, logger="service.sidecar"):
            assert asyncio.run(complete_across_it()) is CompletionOutcome.ACCEPTED
    finally:
        serve(slot, owner)
    assert (session.stats.accepted, len(session.resends)) == (1, 0)
    assert [r.key for r in Delivery(cluster.client()).read_results("lost")] == ["p#0"]


def test_a_heartbeat_on_a_slot_no_master_serves_is_an_outage_and_goes_through_once_it_is_served(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: each beat raised it, the loops logging a traceback at every one."""
    cluster.flushall()
    publish(Delivery(cluster.client()), "beaten", {"w": [item("p", 0, 5)]}, lease_ttl_ms=600_000)
    session = WorkerSession(Delivery(cluster.client()), Holdings(1), SessionSettings("w", retry_for_s=600))
    asyncio.run(session.claim(1))
    slot, owner = unserve(cluster, "beaten")
    try:
        with caplog.at_level(logging.INFO, logger="service.sidecar"):
            unserved = [(asyncio.run(session.heartbeat()), session.heartbeats_failing) for _ in range(2)]
            serve(slot, owner)
            served = (asyncio.run(session.heartbeat()), session.heartbeats_failing)
    finally:
        serve(slot, owner)
    assert (unserved, served) == ([([], True), ([], True)], ([], False))
    said = [r.getMessage().split(":")[0] for r in caplog.records]
    assert said == ["heartbeat failed, leases keep their deadlines", "heartbeats go through again"]
    assert [h.lease.key for h in session.holdings.all()] == ["p#0"]
