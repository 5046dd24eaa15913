"""A sidecar's first claim, completion and failure report after a failover reach the failed master's
schedule at its new master at their first try, on a real 3-master Redis Cluster, where the sidecar's
client's own refresh of its slot map is not due (paced to an hour, ``paced``: within the second after
a read in production).

redis-py reads a cluster's map again on an error at most once a second
(``topology_refresh_min_interval``). A claim or report within the second after another call read the
map (the old master still named) and after the failover went to the old master on every try: a report
waited for its next retry (50 ms doubling, up to 2 s a pause), a claim for the next claim; measured,
the first one landed 0.46-0.82 s after the failover (cluster53, docs/experiments.md). Each now goes
through ``remap.remapped``: where its master did not answer and another master names a new one for its
slot, the map is read and the call sent once more, there. Each test sends one try (``once``, or no
retry window): without the read, each fails with the old master's ``ConnectionError``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import WorkerSession
from service.sidecar.session_settings import SessionSettings
from tests.cluster import LocalCluster, partly_served, slot_of
from tests.service.failover import TIMEOUT_S, copied, failed_over, on_dead, paced, restored
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
TTL_MS = 30_000  # the lease's TTL: it lives through the test, so only the call's reach is measured


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master and moves a slot for good."""
    with partly_served() as local:
        yield local


def _failed_over_after_a_claim(cluster: LocalCluster) -> tuple[WorkerSession, Held]:
    """A session (its worker's inbox on a live master, one try a report) that claimed one of the
    last master's schedule's two items; that master killed, the client's map read again (a call meets
    it: still the old master), then its slot failed over to another master with the schedule's keys."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = paced(delivery)
    sid = on_dead()
    publish(delivery, sid, {"w": [item("p", 0, 5), item("q", 0, 5)]}, lease_ttl_ms=TTL_MS)
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w", retry_for_s=0.0))
    (held,) = asyncio.run(session.claim(1))
    meta = delivery.keys(sid).meta
    old = client.get_node_from_key(meta).port  # type: ignore[no-untyped-call]
    live = [node.port for node in cluster.nodes if node.port != old]  # the first takes its slot
    assert client.get_node_from_key(f"{delivery.prefix}:inbox:{{w}}").port != old  # type: ignore[no-untyped-call]
    keys = copied(old, slot_of(sid))
    next(node for node in cluster.nodes if node.port == old).kill()
    with pytest.raises(redis.ConnectionError):  # a call: the client's refresh not due (``paced``)
        client.get(meta)
    failed_over(live, {slot_of(sid)})
    restored(live[0], keys)
    return session, held


def test_the_first_claim_after_a_failover_leases_at_the_new_master(cluster: LocalCluster) -> None:
    session, _ = _failed_over_after_a_claim(cluster)
    got = asyncio.run(session.claim(1))
    session.delivery.client.close()
    assert [held.lease.key for held in got] == ["q#0"]  # its first run


def test_the_first_completion_after_a_failover_lands_at_the_new_master(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The read is told: one INFO line naming the old master and the new (nothing else shows it)."""
    session, held = _failed_over_after_a_claim(cluster)
    client, meta = session.delivery.client, session.delivery.keys(held.lease.schedule_id).meta
    old = client.get_node_from_key(meta).name  # type: ignore[union-attr]
    with caplog.at_level(logging.INFO, logger="service.delivery.remap"):
        outcome = asyncio.run(session.complete(held, RESULT, once=True))
    new = client.get_node_from_key(meta).name  # type: ignore[union-attr]
    client.close()
    assert outcome is CompletionOutcome.ACCEPTED
    [told] = [r for r in caplog.records if r.name == "service.delivery.remap"]
    assert told.levelno == logging.INFO
    assert f"master {old} did not answer" in told.getMessage()
    assert f"names {new} for {meta}" in told.getMessage()


def test_the_first_failure_report_after_a_failover_lands_at_the_new_master(cluster: LocalCluster) -> None:
    session, held = _failed_over_after_a_claim(cluster)
    outcome = asyncio.run(session.fail(held, "engine died", once=True))
    session.delivery.client.close()
    assert outcome is ReleaseOutcome.REQUEUED
