"""A publish whose announce missed one worker's inbox (its master killed: connection refused), the client
never retrying: the reapers announce it again once that master is back (a real 3-master cluster,
``cluster-require-full-coverage no``; nothing mocked).

Before reannounce65 such a worker learned of the schedule only from the client's retry of the publish
(announce64): a trainer that gave up on the 503, or crashed, left its items to thieves. Now the announce
marks the schedule in Redis before it writes (``service/delivery/announcing.py``), and a reaper, here of
another ``Delivery`` started after the publish as a restarted service's would be, announces it again;
a schedule cancelled meanwhile is not written back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from service.delivery import CompletionOutcome, Delivery, keys
from service.delivery.errors import IndexNodeDown
from service.delivery.reaper import Reaper
from service.embedded import EmbeddedServer
from tests.cluster import LocalCluster, inbox_layout, partly_served
from tests.service.delivery.conftest import schedule
from tests.service.delivery.on_cluster import inbox, service_delivery
from tests.service.finished import RESULT

pytestmark = pytest.mark.slow
BOUND_S = 20.0  # the master back and answering -> the worker finds the schedule in its inbox
ITEMS = 3  # the lost worker's items


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master."""
    with partly_served() as local:
        yield local


def _published_with_a_master_down(cluster: LocalCluster) -> tuple[str, str, str, EmbeddedServer, Delivery]:
    """Kill the master of one worker's inbox and publish: the announce raises that node's error, the
    schedule stored and announced to the other worker. The client does not retry."""
    sid, lost, told, down = inbox_layout(cluster)
    publisher = service_delivery(cluster)
    node = next(n for n in cluster.nodes if n.port == down)
    node.kill()
    with pytest.raises(IndexNodeDown):
        publisher.publish(schedule(sid, {lost: ITEMS, told: 1}))
    assert publisher.schedules_for(told) == [sid]
    return sid, lost, told, node, publisher


def _back(cluster: LocalCluster, node: EmbeddedServer) -> None:
    """Start the killed master again (its own ``nodes.conf``: it rejoins with its slots)."""
    node.start()
    cluster._wait_ok(30)


def test_a_worker_whose_inbox_master_was_down_at_the_publish_claims_and_completes_its_items(
    cluster: LocalCluster,
) -> None:
    """No retry: a reaper started after the publish announces the schedule to the worker once its
    inbox's master is back, within ``BOUND_S``; the worker claims its items once each and completes
    them, its inbox holds the schedule once, and the mark and the index entry are gone. On main the
    worker's inbox never held it (the wait below ran out)."""
    sid, lost, _, node, publisher = _published_with_a_master_down(cluster)
    reaper = Reaper(service_delivery(cluster)).start()  # another process's: nothing of the publish in memory
    worker = service_delivery(cluster)
    try:
        time.sleep(3.0)  # passes while the master is down: each fails at that node, nothing else
        assert inbox(worker, lost) == []
        _back(cluster, node)
        waited = time.monotonic()
        while sid not in inbox(worker, lost):
            assert time.monotonic() - waited < BOUND_S, "the worker never learned of the schedule"
            time.sleep(0.1)
        leases = worker.claim(sid, lost, 10)
        assert sorted(lease.item.key for lease in leases) == [f"{lost}-{i}#0" for i in range(ITEMS)]
        assert [worker.complete(lease, RESULT) for lease in leases] == [CompletionOutcome.ACCEPTED] * ITEMS
        assert worker.claim(sid, lost, 10) == []
        assert worker.schedules_for(lost) == [sid]  # one entry: a sorted set
        while worker.client.zscore(keys.announcing_index(), sid) is not None:
            assert time.monotonic() - waited < BOUND_S + 5, "the reaper never dropped its entry"
            time.sleep(0.1)
        assert worker.client.hget(keys.schedule_keys(sid).meta, keys.ANNOUNCING) is None
    finally:
        reaper.stop()
    assert worker.progress(sid).done == ITEMS
    publisher.client.close()


def test_a_schedule_cancelled_while_the_master_is_down_is_not_announced_again(cluster: LocalCluster) -> None:
    """Cancelled while the inbox's master is down (its retire meets that node too), the schedule is
    never written into the worker's inbox once the master is back: the reapers retire it from every
    index, the announcing index's entry with it (a reap of the settled schedule, or the announce
    again finding it settled), and nothing writes it back (its mark, where the retire came first, is
    left to expire with its keys: nothing lists it)."""
    sid, lost, told, node, publisher = _published_with_a_master_down(cluster)
    with pytest.raises(IndexNodeDown):
        publisher.cancel(sid)
    reaper = Reaper(service_delivery(cluster)).start()
    worker = service_delivery(cluster)
    try:
        _back(cluster, node)
        waited = time.monotonic()
        listed, active = keys.announcing_index(), keys.active_index()
        while worker.client.zscore(listed, sid) is not None or worker.client.zscore(active, sid) is not None:
            assert sid not in inbox(worker, lost)
            assert time.monotonic() - waited < BOUND_S, "the reaper never retired the cancelled schedule"
            time.sleep(0.1)
        time.sleep(3.0)  # past the re-announce's wait: later passes write nothing back either
        assert inbox(worker, lost) == []
        assert inbox(worker, told) == []
        assert worker.client.zscore(listed, sid) is None
        assert worker.claim(sid, lost, 10) == []
    finally:
        reaper.stop()
    publisher.client.close()
