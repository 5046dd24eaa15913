"""``complete_and_claim`` after its schedule's master failed over reports and leases at the new master,
on a real 3-master Redis Cluster, where the client's own refresh of its slot map is not due (paced to
an hour, ``paced``: within the second after a read in production).

Its pipeline goes to the slot's master on that master's own client (redis-py refuses EVALSHA in
cluster pipelines), whose failure reads no map: after a failover every try went to the old master and
failed with its ``ConnectionError``, for good, though redis-py's refresh was not paced (cluster55: 351
tries over 20 s, docs/experiments.md). It now goes as a sidecar's own calls do (``remap.remapped``):
where the master did not answer and another master names a new one for the slot, the map is read and
the pipeline sent once more, there. ``LocalCluster`` has no replicas: the failover is the slot given to
another master with the schedule's keys copied there first, as a replica holds them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from service.delivery import remap
from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest, slot_of
from tests.service.failover import TIMEOUT_S, Copied, copied, failed_over, on_dead, paced, restored
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
TTL_MS = 30_000  # the lease lives through the test: only the call's reach is under test


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master and moves a slot for good."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def _held_on_a_killed_master(cluster: LocalCluster) -> tuple[Delivery, Lease, list[int], list[Copied]]:
    """Worker ``w`` holds a lease of the last master's schedule (two items, the first claimed); that
    master killed: the delivery (its own refresh paced), the lease, the live masters' ports (the first
    is to take the slot) and the schedule's keys as the old master held them (as its replica would)."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = paced(delivery)
    sid = on_dead()
    publish(delivery, sid, {"w": [item("p", 0, 5), item("q", 0, 5)]}, lease_ttl_ms=TTL_MS)
    (lease,) = delivery.claim(sid, "w", 1)
    old = client.get_node_from_key(delivery.keys(sid).meta).port  # type: ignore[no-untyped-call]
    live = [node.port for node in cluster.nodes if node.port != old]
    held = copied(old, slot_of(sid))
    next(node for node in cluster.nodes if node.port == old).kill()
    return delivery, lease, live, held


def _fail_over(lease: Lease, live: list[int], held: list[Copied]) -> None:
    """The lease's slot given to ``live[0]``, with the keys the old master held."""
    failed_over(live, {slot_of(lease.schedule_id)})
    restored(live[0], held)


def _complete_and_claim(delivery: Delivery, lease: Lease) -> tuple[list[CompletionOutcome], list[str]]:
    """The lease's item reported and one more claimed in one call: the outcomes, the keys leased."""
    entries = [(lease.key, lease.token, RESULT)]
    outcomes, leases = delivery.complete_and_claim(lease.schedule_id, "w", entries, 1)
    return outcomes, [each.key for each in leases]


def test_the_first_complete_and_claim_after_a_failover_reports_and_leases_at_the_new_master(
    cluster: LocalCluster,
) -> None:
    delivery, lease, live, held = _held_on_a_killed_master(cluster)
    _fail_over(lease, live, held)
    try:
        assert _complete_and_claim(delivery, lease) == ([CompletionOutcome.ACCEPTED], ["q#0"])
    finally:
        delivery.client.close()


def test_a_complete_and_claim_that_failed_before_the_failover_lands_at_the_new_master_after_it(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The try made while the master is down and not yet failed over raises its ``ConnectionError``
    (every master that answers still names the old one): the try after the failover lands, where each
    went to the old master for good. The window that shares one ask among calls (``RECENT_S``) is set
    to 0: the second try asks again whenever it comes."""
    monkeypatch.setattr(remap, "RECENT_S", 0.0)
    delivery, lease, live, held = _held_on_a_killed_master(cluster)
    try:
        with pytest.raises(redis.ConnectionError):
            _complete_and_claim(delivery, lease)
        _fail_over(lease, live, held)
        assert _complete_and_claim(delivery, lease) == ([CompletionOutcome.ACCEPTED], ["q#0"])
    finally:
        delivery.client.close()
