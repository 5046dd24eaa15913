"""What a publish keeps, and how a replay is judged, where no other test pinned it down: each test
here kills a mutant of service/delivery/lua/publish.lua that the rest of the delivery, pipeline and
API tests let live (docs/experiments.md, "Mutation check of the core", helper luamutants2). Each
states what a caller sees through Delivery, never the Lua."""

from __future__ import annotations

import dataclasses

from scheduler.sim_steal import STEAL_SCAN
from service.delivery import Delivery, DeliveryItem, PublishedSchedule, PublishOutcome
from tests.service.delivery.conftest import item, schedule


def _short(key: str) -> DeliveryItem:
    """An item a 3,000-token cache holds (32 + 2,000 tokens)."""
    return dataclasses.replace(item(key), max_new_tokens=2_000)


def test_a_replay_without_a_digest_of_a_schedule_stored_with_one_changes_nothing(
    delivery: Delivery,
) -> None:
    sched = schedule("s", {"a": 2})
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.CREATED
    # a caller that does not know the request (no digest) replays the same schedule: not other work
    assert delivery.publish(sched) is PublishOutcome.UNCHANGED
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.UNCHANGED


def test_a_replay_with_a_digest_of_a_schedule_stored_without_one_changes_nothing(
    delivery: Delivery,
) -> None:
    sched = schedule("s", {"a": 2})
    assert delivery.publish(sched) is PublishOutcome.CREATED
    # nothing stored to tell other work by: the same schedule is a replay, whatever its digest
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.UNCHANGED


def test_a_group_too_big_for_a_small_cache_by_the_schedules_first_item_hides_nothing_from_its_thief(
    delivery: Delivery,
) -> None:
    # group p: its head p#0, the first item the schedule lists, too big for a 3,000-token cache (32 +
    # 4,096), the other 64 small; group g between them fits. The thief passes over p whole without
    # counting it toward the 64 items a steal passes over, and takes g, as for a group whose big
    # member sits anywhere else
    p_rest = tuple(_short(f"p#{i}") for i in range(1, STEAL_SCAN + 1))
    g = (_short("g#0"), _short("g#1"))
    queues = {"big": (item("p#0"), *g, *p_rest), "small": ()}
    caps = {"big": 100_000, "small": 3_000}
    delivery.publish(PublishedSchedule("s", queues, prefix_affinity=True, kv_capacity_tokens=caps))
    assert [le.key for le in delivery.steal("s", "small", 4)] == ["g#0", "g#1"]
