"""A sidecar's first heartbeat after a failover extends the leases of the failed master's schedules
at the new master, on a real 3-master Redis Cluster, where the sidecar's client's own refresh of its
slot map is not due (paced to an hour, ``paced``: within the second after a read in production).

redis-py reads a cluster's map again on an error at most once a second
(``topology_refresh_min_interval``). While a master is down and not yet failed over, a sidecar's claims
and pushes meet it and read the map (the old master still named) about once a second; a heartbeat
within the second after the failover sent the lease's extension to the old master on every try, its
refresh not due, and left the lease unextended for a whole beat (a third of its TTL): a lease whose
master took longer than a beat to fail over then lapsed under a live worker, and the reaper gave its
trajectory to another (review52c, docs/experiments.md). The heartbeat walk now reads the map itself on
the first failure of a master (``remap.Remap``, the step keeper's remedy) and sends the schedule once
more, to the new master. ``LocalCluster`` has no replicas: the failover is the slot given to another
master (``CLUSTER SETSLOT ... NODE``, its epoch bumped) with the schedule's keys copied there first, as
a replica holds them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.reaper import reap_all
from service.delivery.records import Lease
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, partly_served, slot_of
from tests.service.failover import TIMEOUT_S, copied, failed_over, on_dead, paced, restored
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
TTL_MS = 30_000  # the lease's TTL: its deadline is far, so only the beat's reach is measured


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master and moves a slot for good."""
    with partly_served() as local:
        yield local


def _lease_failed_over(cluster: LocalCluster) -> tuple[Delivery, Lease]:
    """A lease held on the last master's schedule; that master killed, the client's map read again
    (a claim's call meets it: still the old master), then its slot failed over to another master with
    the schedule's keys: the delivery, the lease, and when the map was read."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = paced(delivery)
    sid = on_dead()
    publish(delivery, sid, {"w": [item("p", 0, 5)]}, lease_ttl_ms=TTL_MS)
    (lease,) = delivery.claim(sid, "w", 1)
    meta = delivery.keys(sid).meta
    old = client.get_node_from_key(meta).port  # type: ignore[no-untyped-call]
    live = [node.port for node in cluster.nodes if node.port != old]  # the first takes its slot
    held = copied(old, slot_of(sid))
    next(node for node in cluster.nodes if node.port == old).kill()
    with pytest.raises(redis.ConnectionError):  # a claim's call: the client's refresh not due (``paced``)
        client.get(meta)
    failed_over(live, {slot_of(sid)})
    restored(live[0], held)
    return delivery, lease


def test_the_first_heartbeat_after_a_failover_extends_the_lease_at_the_new_master(
    cluster: LocalCluster,
) -> None:
    delivery, lease = _lease_failed_over(cluster)
    alive, reach = delivery.heartbeat_reaching(
        [lease], None, Reach(delivery.client, delivery.prefix, learns=True)
    )
    delivery.client.close()
    assert reach.missing == {}
    assert [(a.key, a.deadline_ms > lease.deadline_ms) for a in alive] == [(lease.key, True)]


def test_a_walk_that_does_not_learn_leaves_the_map_to_the_clients_own_refresh(cluster: LocalCluster) -> None:
    """A walk on the event loop (a claim's, ``learns=False``) makes no blocking call of its own: the
    lease's schedule is missed with the old master's error, for the next walk."""
    delivery, lease = _lease_failed_over(cluster)
    alive, reach = delivery.heartbeat_reaching([lease], None, Reach(delivery.client, delivery.prefix))
    delivery.client.close()
    assert alive == []
    assert isinstance(reach.missing.get(lease.schedule_id), redis.ConnectionError)


def test_the_first_reaper_pass_after_a_failover_reaches_the_schedule_at_the_new_master(
    cluster: LocalCluster,
) -> None:
    """The reaper's pass (on a thread of its own: its walk ``learns``) reaches the schedule in the
    same pass, its lease past its deadline on the pass's clock, rather than a pass later."""
    delivery, lease = _lease_failed_over(cluster)
    reach = Reach(delivery.client, delivery.prefix, learns=True)
    reports = reap_all(delivery, now_ms=lease.deadline_ms + 1, reach=reach)
    delivery.client.close()
    assert reach.missing == {}
    assert lease.schedule_id in reports
