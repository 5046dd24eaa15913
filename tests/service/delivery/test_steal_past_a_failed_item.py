"""A thief that failed the only item the busiest queue holds for it steals from the next queue: that
queue has nothing it may ever take (its retry was sent away from it on purpose: release.lua's
``retry_target``), which time does not change, so the steal passes on to the next victim as it does
past a queue of pinned items, rather than ending (mutation testing, helper mutants63)."""

from __future__ import annotations

import redis

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
