"""A sidecar's claims go on from the schedules it knows while the Redis Cluster master holding its
worker's inbox is down (its process killed: connection refused), its schedules on the other masters
answering (``service/sidecar/inbox.py``; a real cluster, ``cluster-require-full-coverage no``).

Every claim read the inbox first, outside the walk's reach: with that one master down every claim of
the worker raised its ``ConnectionError`` (the runner's "redis unavailable, not claiming", its
readiness probe down), nothing claimed until a failover, or ever without a replica, though the items
of its schedules waited on masters that answered (inbox64, docs/experiments.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import Delivery, keys
from service.delivery.outcomes import CompletionOutcome
from service.delivery.records import TrajectoryResult
from service.delivery.retries import short_retry
from service.sidecar import inbox
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import (
    LocalCluster,
    key_owner,
    partly_served,
    schedule_off,
    serve_everywhere,
    unserve_range,
)
from tests.service.sidecar.procs import InboxReads, item, publish

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills the inbox's master for good."""
    with partly_served() as local:
        yield local


def _session(cluster: LocalCluster) -> WorkerSession:
    """Worker ``w``'s session on a client that retries as the sidecar's (``short_retry``)."""
    client = RedisCluster(startup_nodes=cluster.startup_nodes, decode_responses=True, retry=short_retry())
    return WorkerSession(InboxReads(client), Holdings(8), SessionSettings("w"))


def _kill_inbox_master(cluster: LocalCluster) -> int:
    port = key_owner(cluster, keys.inbox("w"))
    next(node for node in cluster.nodes if node.port == port).kill()
    return port


def test_claims_go_on_from_the_known_schedules_oldest_first_while_the_inbox_master_is_down(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three schedules known, none on the inbox's master: the cancelled one leases nothing (its
    script decides, not the inbox), the older of the other two is claimed first, a lease taken is
    completed and accepted once, the inbox's failure is told once, and the second claim, within
    ``RETRY_S`` of it, does not ask the inbox again. Before: every claim raised."""
    monkeypatch.setattr(inbox, "RETRY_S", 60.0)  # both claims within it on a loaded host too
    inbox_port = key_owner(cluster, keys.inbox("w"))
    old, gone, young = (schedule_off(cluster, start, inbox_port) for start in ("o", "g", "y"))
    delivery = Delivery(cluster.client())
    for sid in (old, gone, young):  # published in this order: the inbox's order too
        publish(delivery, sid, {"w": [item(sid, i, 5) for i in range(3)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    session = _session(cluster)
    assert [info.schedule_id for info in asyncio.run(session.schedules())] == [old, gone, young]
    delivery.cancel(gone)
    _kill_inbox_master(cluster)
    assert isinstance(session.delivery, InboxReads)
    session.delivery.reads = 0
    caplog.set_level(logging.INFO, logger="service.sidecar")
    first = asyncio.run(session.claim(2))
    second = asyncio.run(session.claim(8))
    assert session.delivery.reads == 1
    assert [h.lease.key for h in first] == [f"{old}#0", f"{old}#1"]
    assert sorted(h.lease.key for h in second) == [f"{old}#2", *(f"{young}#{i}" for i in range(3))]
    result = TrajectoryResult(output_tokens=5, finish_reason="stop")
    assert asyncio.run(session.complete(first[0], result)) is CompletionOutcome.ACCEPTED
    assert delivery.complete(first[0].lease, result) is CompletionOutcome.DUPLICATE
    ours = [r for r in caplog.records if r.name == "service.sidecar"]  # a settled retire's is the client's
    warned = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
    assert [line.split(" (")[0] for line in warned] == ["claims cannot read worker w's inbox"]


def test_a_session_that_knows_no_schedule_raises_the_inbox_masters_error(cluster: LocalCluster) -> None:
    """Nothing known to claim from: the claim is the runner's outage, as before."""
    inbox_port = key_owner(cluster, keys.inbox("w"))
    sid = schedule_off(cluster, "s", inbox_port)
    publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=60_000)
    session = _session(cluster)
    _kill_inbox_master(cluster)
    with pytest.raises(redis.ConnectionError):
        asyncio.run(session.claim(1))


def test_a_claim_reads_the_inbox_again_once_its_slot_is_served_and_claims_a_schedule_published_since(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's slot unserved (no master takes it): claims go on from the known schedule, and the
    inbox, asked again in the background, is read once its slot is served: a schedule published since
    is claimed, and one line says the inbox answers again."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    inbox_port = key_owner(cluster, keys.inbox("w"))
    known, later = (schedule_off(cluster, start, inbox_port) for start in ("k", "l"))
    delivery = Delivery(cluster.client())
    publish(delivery, known, {"w": [item(known, i, 5) for i in range(50)]}, lease_ttl_ms=60_000)
    session = _session(cluster)
    asyncio.run(session.schedules())
    slot = key_slot(keys.inbox("w").encode())
    unserve_range(cluster, range(slot, slot + 1))
    caplog.set_level(logging.INFO, logger="service.sidecar")
    served = False

    async def claims() -> list[str]:
        nonlocal served
        taken = [h.lease.key for h in await session.claim(1)]  # the inbox fails: the known walked
        serve_everywhere(cluster, slot, inbox_port)
        served = True
        publish(Delivery(cluster.client()), later, {"w": [item(later, 0, 5)]}, lease_ttl_ms=60_000)
        for _ in range(200):  # until the background read answered and a claim took its news
            taken += [h.lease.key for h in await session.claim(1)]
            if taken[-1].startswith(later):
                break
            await asyncio.sleep(0.05)
        return taken

    try:
        taken = asyncio.run(claims())
    finally:
        if not served:
            serve_everywhere(cluster, slot, inbox_port)
    assert (taken[0], taken[-1]) == (f"{known}#0", f"{later}#0")
    assert "claims read worker w's inbox again" in caplog.text
