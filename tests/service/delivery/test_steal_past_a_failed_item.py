"""A thief that failed the only item the busiest queue holds for it steals from the next queue: that
queue has nothing it may ever take (its retry was sent away from it on purpose: release.lua's
``retry_target``), which time does not change, so the steal passes on to the next victim as it does
past a queue of pinned items, rather than ending (mutation testing, helper mutants63)."""

from __future__ import annotations

import redis

from scheduler.sim_steal import STEAL_SCAN
from service.delivery import Delivery, LeaseSettings, PublishedSchedule
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item

T0 = 1_000_000  # explicit clock (ms)


def test_a_thief_passes_a_queue_holding_only_its_failed_item_for_the_next_busiest(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queues = {
        "a": (item("a-0#0", 1_000.0),),
        "b": (item("b-0#0"),),
        "c": (),
        "d": (item("d-0#0", 10.0), item("d-1#0", 10.0)),  # less work than the retry's, planned for d
    }
    delivery.publish(PublishedSchedule("s", queues, lease=LeaseSettings(lease_ttl_ms=10_000)), now_ms=T0)
    delivery.claim("s", "b", 1, now_ms=T0)  # b runs its own item: its queue is empty
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.claim("s", "c", 1, now_ms=T0) == []  # c seen, idle
    delivery.fail(lease, "engine refused it", now_ms=T0 + 1)
    progress = delivery.progress("s")
    assert (progress.workers["b"].queued, progress.workers["d"].queued) == (1, 2)  # the retry went to b
    assert [le.key for le in delivery.steal("s", "a", 4, now_ms=T0 + 2)] == ["d-1#0"]  # half of d's two
    assert_sound(redis_client, "s")


def test_a_thief_passes_a_queue_whose_tail_holds_scan_items_it_failed_for_the_next_busiest(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Passing ``SCAN`` items of one queue (here the thief's own failures, sent to the one other worker
    seen alive) ends that queue's look with 'nothing for this thief', which time does not change: the
    steal tries the next queue, as past a queue of pins, rather than ending as a refusal by the KV gate
    or the deadline guard ends it. mutants63 left this alive: 64 failed items seemed a costly set-up."""
    own = tuple(item(f"a-{i}#0") for i in range(STEAL_SCAN))
    queues = {"a": own, "b": (item("b-0#0"),), "c": (item("c-0#0", 10.0), item("c-1#0", 10.0))}
    delivery.publish(PublishedSchedule("s", queues, lease=LeaseSettings(lease_ttl_ms=10_000)), now_ms=T0)
    delivery.claim("s", "b", 1, now_ms=T0)  # b runs its own item, seen alive: c is never seen
    for lease in delivery.claim("s", "a", STEAL_SCAN, now_ms=T0):
        delivery.fail(lease, "engine refused it", now_ms=T0 + 1)  # each retry goes to b's queue
    progress = delivery.progress("s")
    assert (progress.workers["b"].queued, progress.workers["c"].queued) == (STEAL_SCAN, 2)
    assert [le.key for le in delivery.steal("s", "a", 4, now_ms=T0 + 2)] == ["c-1#0"]
    assert_sound(redis_client, "s")
