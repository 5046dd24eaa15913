"""The master of the reapers' active index killed mid-announce (after the announce's mark, before its
writes), the client never retrying, on a real 3-master cluster (``cluster-require-full-coverage no``;
nothing mocked: the kill is timed by a hook on the announce's opening script).

Neither the active index nor the announcing index holds the schedule then (both on that master; the
entry its publish wrote ahead of its script, ops67, went with the master's data: no persistence), so
the reapers neither reap nor announce it again; the workers whose inboxes are on the other masters
see it and claim. Before ops66 only the client's retry repaired it: a worker whose inbox is on that
master never learned of the schedule, and the others' lapsed leases were never reaped. Now the
announcing process keeps it (``DeliveryIndexes.unlisted``) and its reaper announces it again once
that master answers (``announcing.relist``); a schedule cancelled meanwhile is retired, not written
back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from service.delivery import CompletionOutcome, Delivery, announcing, keys
from service.delivery.errors import IndexNodeDown
from service.delivery.reaper import Reaper
from service.embedded import EmbeddedServer
from tests.cluster import LocalCluster, key_owner, partly_served, schedule_off
from tests.service.delivery.conftest import schedule
from tests.service.delivery.on_cluster import inbox, service_delivery
from tests.service.finished import RESULT

pytestmark = pytest.mark.slow
BOUND_S = 20.0  # the master back and answering -> the worker finds the schedule in its inbox
ITEMS = 3  # the lost worker's items


@dataclass
class ActiveDown:
    """A schedule published while the active index's master died mid-announce; the publisher (whose
    process keeps what its announce did not list), the worker whose inbox is on that master, the
    worker whose inbox answered, and the killed node."""

    publisher: Delivery
    worker: Delivery  # a sidecar's, built before the kill (the cluster's URL may name that master)
    cluster: LocalCluster
    sid: str
    lost: str
    told: str
    node: EmbeddedServer

    def back(self) -> None:
        """Start the killed master again (its own ``nodes.conf``: it rejoins with its slots)."""
        self.node.start()
        self.cluster._wait_ok(30)


@pytest.fixture
def active_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[ActiveDown]:
    """Publish with the active index's master killed right after the announce's mark (``BEGIN``):
    the schedule's keys and one worker's inbox on other masters, another worker's on that one."""
    with partly_served() as cluster:
        down = key_owner(cluster, keys.active_index())
        workers = [f"w{i}" for i in range(64)]
        lost = next(w for w in workers if key_owner(cluster, keys.inbox(w)) == down)
        told = next(w for w in workers if key_owner(cluster, keys.inbox(w)) != down)
        sid = schedule_off(cluster, "s", down)
        node = next(n for n in cluster.nodes if n.port == down)
        begin = announcing.begin

        def begin_then_kill(*args: Any) -> Any:
            begun = begin(*args)
            node.kill()
            return begun

        monkeypatch.setattr(announcing, "begin", begin_then_kill)
        publisher, worker = service_delivery(cluster), service_delivery(cluster)
        with pytest.raises(IndexNodeDown):
            publisher.publish(schedule(sid, {lost: ITEMS, told: 1}))
        monkeypatch.setattr(announcing, "begin", begin)
        try:
            yield ActiveDown(publisher, worker, cluster, sid, lost, told, node)
        finally:
            publisher.client.close()
            worker.client.close()


def test_the_window_then_the_publishers_reaper_announces_it_to_every_worker_once_the_master_is_back(
    active_down: ActiveDown,
) -> None:
    """While the master is down: the answering worker's inbox holds the schedule (its sidecar
    claims), the other's does not, the mark holds and the publisher keeps it unlisted; the reaper's
    passes fail at that master. Once it is back, within ``BOUND_S``, the publisher's reaper has
    announced it to every inbox and the reapers' index: the worker claims its items once and
    completes them, the mark is cleared. On main the worker's inbox never held it."""
    out, publisher, worker = active_down, active_down.publisher, active_down.worker
    assert inbox(worker, out.told) == [out.sid]
    assert worker.claim(out.sid, out.told, 10) != []  # the schedule's master answers: claims go on
    assert publisher.unlisted == {out.sid: keys.DEFAULT_RETENTION_S}
    assert worker.client.hget(keys.schedule_keys(out.sid).meta, keys.ANNOUNCING) is not None
    reaper = Reaper(publisher).start()
    try:
        time.sleep(2.0)  # passes while the master is down: each fails reading the indexes
        assert reaper.passes == 0
        assert inbox(worker, out.lost) == []
        out.back()
        waited = time.monotonic()
        while out.sid not in inbox(worker, out.lost):
            assert time.monotonic() - waited < BOUND_S, "the worker never learned of the schedule"
            time.sleep(0.1)
        assert worker.active_schedules() == [out.sid]  # the reapers walk it again
        leases = worker.claim(out.sid, out.lost, 10)
        assert sorted(lease.item.key for lease in leases) == [f"{out.lost}-{i}#0" for i in range(ITEMS)]
        assert [worker.complete(lease, RESULT) for lease in leases] == [CompletionOutcome.ACCEPTED] * ITEMS
        assert worker.claim(out.sid, out.lost, 10) == []
        assert worker.client.hget(keys.schedule_keys(out.sid).meta, keys.ANNOUNCING) is None
        assert publisher.unlisted == {}
    finally:
        reaper.stop()


def test_a_schedule_cancelled_while_the_master_is_down_is_retired_not_written_back(
    active_down: ActiveDown,
) -> None:
    """Cancelled while the master is down (its retire holds the active index back, and that node is
    the one down), the schedule is never written into the lost worker's inbox once it is back: the
    publisher's reaper announce finds it settled and retires it from every index."""
    out, publisher, worker = active_down, active_down.publisher, active_down.worker
    with pytest.raises(IndexNodeDown):
        publisher.cancel(out.sid)
    reaper = Reaper(publisher).start()
    try:
        out.back()
        waited = time.monotonic()
        while publisher.unlisted:
            assert time.monotonic() - waited < BOUND_S, "the reaper never looked at the schedule again"
            time.sleep(0.1)
        time.sleep(3.0)  # past the re-announce's wait: later passes write nothing back either
        assert inbox(worker, out.lost) == inbox(worker, out.told) == []
        assert worker.active_schedules() == []
        assert worker.client.zcard(keys.announcing_index()) == 0
        assert worker.claim(out.sid, out.lost, 10) == []
    finally:
        reaper.stop()
