"""Edges of the steal deadline guard (docs/delivery.md "Stealing") that no other test pinned down:
each test here kills a mutant of service/delivery/lua/steal.lua that the rest of the delivery tests
let live (docs/experiments.md, "Mutation check of the core", helper luamutants2). Each states what
a thief sees through Delivery.steal, never the Lua. Clocks are pinned, and every figure is exact:
1,000-token items, rates that divide 10^6, so a bound is met to the millisecond."""

from __future__ import annotations

import dataclasses

from service.delivery import Delivery, DeliveryItem, LeaseSettings, PublishedSchedule
from tests.service.delivery.conftest import item

T0 = 1_000_000  # publication time, ms (pinned)


def _planned(key: str, start_ms: int, end_ms: int) -> DeliveryItem:
    return dataclasses.replace(item(key, 1_000.0), planned_start_ms=start_ms, deadline_ms=end_ms)


def _publish(delivery: Delivery) -> None:
    """Owner b: five 1,000-token items planned back to back, 10 s each, from 10 s to 60 s."""
    queue = tuple(_planned(f"b-{i}#0", 10_000 * (i + 1), 10_000 * (i + 2)) for i in range(5))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}), now_ms=T0)


def _stolen(delivery: Delivery, at_ms: int, rate: float, busy_ms: int = 0) -> list[str]:
    leases = delivery.steal("s", "a", 2, now_ms=T0 + at_ms, rate_tokens_per_s=rate, busy_ms=busy_ms)
    return [le.key for le in leases]


def test_a_thief_whose_held_work_ends_exactly_at_the_deadline_still_steals(delivery: Delivery) -> None:
    _publish(delivery)
    # the tail is due at 60 s; at 5 s the thief's own work runs 55 s more: it ends at 60 s, on time
    assert _stolen(delivery, 5_000, 100.0, busy_ms=55_000) == ["b-4#0"]


def test_a_thief_whose_held_work_ends_a_millisecond_past_the_deadline_takes_nothing(
    delivery: Delivery,
) -> None:
    _publish(delivery)
    assert _stolen(delivery, 5_000, 100.0, busy_ms=55_001) == []


def test_a_steal_that_pays_off_exactly_at_the_length_margin_is_taken(delivery: Delivery) -> None:
    _publish(delivery)
    # at 10 s (b's head is due now: b is not late), 50 tok/s: 20 s for the tail; four times longer
    # it ends at 90 s, the owner's 50 s start plus four times its 10 s run: exactly even, so the
    # steal still pays off; for the item before it (start 40 s: 80 s) it does not
    assert _stolen(delivery, 10_000, 50.0) == ["b-4#0"]


def test_an_owner_behind_its_head_by_five_seconds_gives_a_thief_five_seconds_more(
    delivery: Delivery,
) -> None:
    _publish(delivery)
    # at 15 s b has not started its head (planned at 10 s; the next at 20 s): 5 s late, so its tail
    # is due at 65 s; a thief busy until 62 s takes it, one busy until 65.001 s does not
    assert _stolen(delivery, 15_000, 100.0, busy_ms=50_001) == []
    assert _stolen(delivery, 15_000, 100.0, busy_ms=47_000) == ["b-4#0"]


def test_a_group_its_dead_owner_abandoned_moves_to_even_a_slow_thief_though_the_plan_runs_ahead(
    delivery: Delivery,
) -> None:
    ttl = 10_000
    group = (_planned("q#0", 100_000, 110_000), _planned("q#1", 100_000, 110_000))
    lease = LeaseSettings(lease_ttl_ms=ttl)
    delivery.publish(
        PublishedSchedule("s", {"a": (), "o": group}, lease=lease, prefix_affinity=True), now_ms=T0
    )
    delivery.claim("s", "o", 1, now_ms=T0)  # o starts q early (its plan says 100 s), then dies
    delivery.reap("s", now_ms=T0 + ttl + 1)  # the lease lapses: q#0 back at the head of o's queue
    # o's plan still runs ahead (its head is due at 100 s), and a thief at 1 tok/s would end q long
    # past its 110 s; but o abandoned the group, so no deadline guards it: the thief takes it whole
    assert _stolen(delivery, 2 * ttl + 1, 1.0) == ["q#0", "q#1"]
