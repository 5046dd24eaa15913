"""An announce, and a retire, while the slot of one worker's inbox is not served (every master dropped
it: a reshard's gap; the cluster serves its other slots, ``cluster-require-full-coverage no``), on a
real 3-master cluster, nothing mocked.

``DeliveryIndexes._each_node`` sends one pipeline per node; a node that did not answer was raised after
the others, but a slot not served (its node's "Hash slot not served", the client's retries and map
refresh spent) was raised at once, so the nodes after it were not sent: the other workers were not
announced the schedule, or not retired from it. Now it is one more group that failed: the rest are
sent, it is raised after them, and what it leaves is the reapers' to repair (the announce's listing,
the retire's held-back active index).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from redis.crc import key_slot

from service.delivery import CompletionOutcome, Delivery, keys
from service.delivery.announcing import reannounce
from service.delivery.errors import REDIS_FAILED, SLOT_NOT_SERVED
from service.delivery.reaper import reap_all
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, key_owner, partly_served, serve_ranges, unserve_range
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

pytestmark = pytest.mark.slow


@dataclass
class SlotOut:
    """The schedule, the worker whose inbox slot is out (sorted first: its node's pipeline goes before
    the other inbox's), the worker whose inbox is on a third master, and the slot out."""

    delivery: Delivery
    cluster: LocalCluster
    sid: str
    lost: str
    told: str
    slot: range
    owner: int

    def back(self) -> None:
        """The slot served again by its master."""
        serve_ranges(self.cluster, {self.slot: self.owner})


@pytest.fixture
def slot_out() -> Iterator[SlotOut]:
    """A cluster of the test's own (it drops a slot); the service's client built while every slot
    was served, as a running replica's."""
    with partly_served() as cluster:
        active = key_owner(cluster, keys.active_index())
        workers = [f"w{i:02d}" for i in range(64)]
        lost = next(w for w in workers if key_owner(cluster, keys.inbox(w)) != active)
        owner = key_owner(cluster, keys.inbox(lost))
        told = next(
            w for w in workers if w > lost and key_owner(cluster, keys.inbox(w)) not in (active, owner)
        )
        slot = key_slot(keys.inbox(lost).encode())
        sid = next(
            f"s{i}" for i in range(1000) if key_owner(cluster, keys.schedule_keys(f"s{i}").meta) != owner
        )
        settings = Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=1.0)
        delivery = Delivery(connect(settings))
        try:
            yield SlotOut(delivery, cluster, sid, lost, told, range(slot, slot + 1), owner)
        finally:
            delivery.client.close()


def test_an_announce_reaches_the_nodes_after_a_slot_not_served_and_the_reapers_the_rest(
    slot_out: SlotOut,
) -> None:
    """The publish raises the slot's error after the other nodes' writes: the third master's worker
    and the reapers hold the schedule, its mark holds; once the slot is served, a reaper's announce
    again reaches the worker that missed it. On main the third master's inbox stayed empty."""
    out, delivery = slot_out, slot_out.delivery
    unserve_range(out.cluster, out.slot)
    with pytest.raises(SLOT_NOT_SERVED):
        delivery.publish(schedule(out.sid, {out.lost: 2, out.told: 1}))
    assert delivery.schedules_for(out.told) == [out.sid]
    assert delivery.active_schedules() == [out.sid]
    assert delivery.client.hget(keys.schedule_keys(out.sid).meta, keys.ANNOUNCING) is not None
    assert delivery.unlisted == {}  # listed: the reapers' (not this process's) to repair
    out.back()
    assert reannounce(delivery, after_ms=0).announced == [out.sid]
    assert delivery.schedules_for(out.lost) == [out.sid]
    assert delivery.client.hget(keys.schedule_keys(out.sid).meta, keys.ANNOUNCING) is None


def test_a_retire_clears_the_nodes_after_a_slot_not_served_and_holds_the_active_index_back(
    slot_out: SlotOut,
) -> None:
    """A cancel while the slot is out: the third master's inbox is retired, the active index (held
    back: ``hold_back``, another group failed) keeps it, so a reap retires it again once the slot is
    served. On main the third master's inbox kept the cancelled schedule."""
    out, delivery = slot_out, slot_out.delivery
    delivery.publish(schedule(out.sid, {out.lost: 2, out.told: 1}))
    unserve_range(out.cluster, out.slot)
    with pytest.raises(REDIS_FAILED):
        delivery.cancel(out.sid)
    assert delivery.schedules_for(out.told) == []
    assert delivery.active_schedules() == [out.sid]
    out.back()
    reap_all(delivery)
    assert delivery.active_schedules() == []
    assert delivery.schedules_for(out.lost) == []
    assert delivery.client.zcard(keys.announcing_index()) == 0


def test_a_completion_that_settles_the_schedule_is_answered_while_a_slot_of_its_retire_is_out(
    slot_out: SlotOut, caplog: pytest.LogCaptureFixture
) -> None:
    """The last completion's retire meets the slot not served: the completion is answered
    ``ACCEPTED`` once (a WARNING, the schedule kept in the active index for the reapers), as for a
    node that does not answer (cluster55). On main the slot's error was the completion's."""
    out, delivery = slot_out, slot_out.delivery
    delivery.publish(schedule(out.sid, {out.lost: 1, out.told: 1}))
    leases = [*delivery.claim(out.sid, out.lost, 10), *delivery.claim(out.sid, out.told, 10)]
    unserve_range(out.cluster, out.slot)
    assert [delivery.complete(lease, RESULT) for lease in leases] == [CompletionOutcome.ACCEPTED] * 2
    assert "its retire from the indexes left to the reapers" in caplog.text
    assert delivery.schedules_for(out.told) == []
    assert delivery.active_schedules() == [out.sid]
    out.back()
    reap_all(delivery)
    assert delivery.active_schedules() == delivery.schedules_for(out.lost) == []
