"""One master of a real 3-master cluster at its ``maxmemory`` (policy ``noeviction``: it refuses every
write that may grow it, "OOM command not allowed when used memory > 'maxmemory'", and runs the rest)
while a schedule is published and reaped: nothing mocked, the session's cluster, its memory set back
after each test.

Before ops67 a refusal from one node ended ``DeliveryIndexes._each_node`` at once: an inbox's master
refusing left the inboxes of the nodes after it unwritten, and the active index's left every inbox
unwritten and the schedule in no index and not ``unlisted`` (only the client's retry repaired it); a
refusal of the lapse index's write raised out of the reaper's pass, whose requeues were then never
told. Now a refusal is one node's, as a node down is: the others' writes are sent, the refusal is
raised after them (a publish's 503, a pass's outage), never taken for done, and the reapers repair
what it refused once the memory is back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
import redis

from service.delivery import Delivery, keys
from service.delivery.outcomes import ReapReport
from service.delivery.reaper import Reaper
from tests.cluster import LocalCluster, key_owner, schedule_off
from tests.service.delivery.conftest import schedule
from tests.service.delivery.on_cluster import inbox, service_delivery

pytestmark = pytest.mark.slow
BOUND_S = 20.0  # memory back -> the reapers have announced what the refusal left out
LEASE_MS = 2_000  # a lease the reaper tests let lapse


@contextlib.contextmanager
def full(port: int) -> Iterator[None]:
    """The master at ``port`` at its ``maxmemory`` until the block ends (set back after it)."""
    with redis.Redis(port=port) as node:
        node.config_set("maxmemory-policy", "noeviction")
        node.config_set("maxmemory", 1)
        try:
            yield
        finally:
            node.config_set("maxmemory", 0)


@pytest.fixture
def cluster(redis_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session's cluster, emptied before and after."""
    redis_cluster.flushall()
    yield redis_cluster
    redis_cluster.flushall()


@pytest.fixture
def publisher(cluster: LocalCluster) -> Iterator[Delivery]:
    """A ``Delivery`` as the service builds one (built before any node is full)."""
    delivery = service_delivery(cluster)
    yield delivery
    delivery.client.close()


def _workers_on(cluster: LocalCluster, port: int, not_before: str = "") -> str:
    """A worker id sorted after ``not_before`` whose inbox is on the master at ``port``."""
    ids = sorted(f"w{i}" for i in range(200))
    return next(w for w in ids if w > not_before and key_owner(cluster, keys.inbox(w)) == port)


def _lapsed(publisher: Delivery, sid: str) -> None:
    """Publish ``sid`` to w0, lease its item and wait for the lease to lapse, the schedule kept warm
    (a reap every 0.3 s while none lapsed: a silence past half the TTL would grace it, ``pulse``)."""
    publisher.publish(schedule(sid, {"w0": 1}, ttl_ms=LEASE_MS))
    assert len(publisher.claim(sid, "w0", 1)) == 1
    claimed = time.monotonic()
    while time.monotonic() - claimed < (LEASE_MS - 300) / 1000:
        assert publisher.reap(sid).requeued == 0
        time.sleep(0.3)
    time.sleep(max(0.0, (LEASE_MS + 150) / 1000 - (time.monotonic() - claimed)))


def _wait_for(what: str, until: object) -> None:
    """Poll ``until`` (a callable) for ``BOUND_S``."""
    waited = time.monotonic()
    while not until():  # type: ignore[operator]
        assert time.monotonic() - waited < BOUND_S, what
        time.sleep(0.1)


def test_an_inbox_master_out_of_memory_refuses_its_inbox_only_and_the_reapers_repair_it(
    cluster: LocalCluster, publisher: Delivery
) -> None:
    """The master of the first worker's inbox (not the active index's) is full: the publish raises its
    refusal (a 503), after the active index and the next worker's inbox, on the third master, were
    written; the mark holds and the schedule is listed. Once memory is back, a reaper announces it to
    the refused inbox. On main the third master's inbox stayed empty (the refusal raised at once)."""
    active = key_owner(cluster, keys.active_index())
    full_port, third = (n.port for n in cluster.nodes if n.port != active)
    lost = _workers_on(cluster, full_port)
    told = _workers_on(cluster, third, not_before=lost)  # its node's pipeline goes after the refused one
    sid = schedule_off(cluster, "s", full_port)
    with full(full_port):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            publisher.publish(schedule(sid, {lost: 2, told: 1}))
        assert inbox(publisher, told) == [sid]
        assert inbox(publisher, lost) == []
        assert publisher.active_schedules() == [sid]
        assert publisher.client.hget(keys.schedule_keys(sid).meta, keys.ANNOUNCING) is not None
        assert publisher.unlisted == {}  # listed: any replica's reaper repairs it
    reaper = Reaper(service_delivery(cluster)).start()  # another process's
    try:
        _wait_for("the refused inbox never got the schedule", lambda: inbox(publisher, lost) == [sid])
        assert len(publisher.claim(sid, lost, 10)) == 2
    finally:
        reaper.stop()
        reaper.delivery.client.close()


def test_the_active_index_master_out_of_memory_leaves_it_unlisted_and_every_inbox_written(
    cluster: LocalCluster, publisher: Delivery
) -> None:
    """The active index's master is full: its pipeline is refused (neither index lists the schedule),
    both workers' inboxes on the other masters are written, the refusal raised after them; the
    publisher keeps the schedule ``unlisted`` and its reaper lists it once memory is back. On main
    no inbox was written (the active index's pipeline goes first) and nothing kept it."""
    active = key_owner(cluster, keys.active_index())
    one, two = (n.port for n in cluster.nodes if n.port != active)
    first = _workers_on(cluster, one)
    second = _workers_on(cluster, two)
    sid = schedule_off(cluster, "s", active)
    with full(active):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            publisher.publish(schedule(sid, {first: 1, second: 1}))
        assert inbox(publisher, first) == inbox(publisher, second) == [sid]
        assert publisher.active_schedules() == []
        assert publisher.unlisted == {sid: keys.DEFAULT_RETENTION_S}
    reaper = Reaper(publisher).start()
    try:
        _wait_for("the publisher's reaper never listed it", lambda: publisher.active_schedules() == [sid])
        _wait_for("the publisher still holds it unlisted", lambda: publisher.unlisted == {})
    finally:
        reaper.stop()


def test_a_refused_lapse_index_write_still_tells_the_passes_requeues(
    cluster: LocalCluster, publisher: Delivery
) -> None:
    """A lease lapses on a schedule whose master has room while the indexes' master is full: the pass
    requeues it, tells ``on_reap``, and raises the refusal of the lapse index's write after (an
    outage, logged once). On main that refusal raised out of ``reap_all``: the requeue was made and
    never told (no metric, no warning)."""
    active = key_owner(cluster, keys.active_index())
    sid = schedule_off(cluster, "s", active)
    _lapsed(publisher, sid)
    told: list[ReapReport] = []
    reaper = Reaper(publisher, on_reap=told.append)
    with full(active), pytest.raises(redis.exceptions.OutOfMemoryError):
        reaper._pass()
    assert [(report.requeued, report.workers) for report in told] == [(1, ("w0",))]
    reaper._pass()  # memory back: the lapse entry written, nothing to requeue
    assert len(told) == 1


def test_a_reap_its_master_refuses_is_not_taken_for_done_and_is_reaped_after(
    cluster: LocalCluster, publisher: Delivery
) -> None:
    """The schedule's own master is full when its lapsed lease is reaped: the reap is refused (nothing
    of it ran), the pass goes on and raises the refusal after; once memory is back the next pass
    requeues the lease. On main the refusal was logged as a damaged schedule and the pass answered
    nothing wrong."""
    active = key_owner(cluster, keys.active_index())
    sid = schedule_off(cluster, "s", active)
    owner = key_owner(cluster, keys.schedule_keys(sid).meta)
    _lapsed(publisher, sid)
    told: list[ReapReport] = []
    reaper = Reaper(publisher, on_reap=told.append)
    with full(owner), pytest.raises(redis.exceptions.OutOfMemoryError):
        reaper._pass()
    assert told == []
    reaper._pass()
    assert [report.requeued for report in told] == [1]
    assert len(publisher.claim(sid, "w0", 1)) == 1
