"""The steal script's deadline guard, the simulator's rule (scheduler/sim_guard.py, in_time).

An item published with its planned ``start|end`` (``DeliveryItem.planned_start_ms``/``deadline_ms``,
ms after publication) is stolen only if the thief, at its measured decode rate, would finish it by
that end, moved back by how late its owner runs; without a rate, or for items without a deadline,
steals go on as before. Clocks are pinned (``now_ms``) so every case is exact.
"""

from __future__ import annotations

import dataclasses
import math

import redis

from scheduler.deadlines import planned_times
from scheduler.devices import device_profile, model_preset
from scheduler.sim_rules import engine_rules
from scheduler.types import Inventory, Plan, Trajectory, Worker, WorkerPlan
from service.delivery import Delivery, DeliveryItem, PublishedSchedule
from service.delivery.publisher import schedule_from_plan
from service.engines import SERVICE_ENGINE
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item

T0 = 1_000_000  # publication time, ms (pinned)


def _planned(key: str, predicted: float, start_ms: int, end_ms: int) -> DeliveryItem:
    return dataclasses.replace(item(key, predicted), planned_start_ms=start_ms, deadline_ms=end_ms)


def _owner_queue() -> tuple[DeliveryItem, ...]:
    """Owner b: head planned to start at 10 s, four 1,000-token items planned to end at 20..50 s."""
    return (
        _planned("b-0#0", 1_000.0, 10_000, 20_000),
        *(_planned(f"b-{i}#0", 1_000.0, 10_000 * i, 10_000 * (i + 1)) for i in range(1, 5)),
    )


def _publish(delivery: Delivery) -> None:
    delivery.publish(PublishedSchedule("s", {"a": (), "b": _owner_queue()}), now_ms=T0)


def test_a_steal_skips_a_tail_item_whose_deadline_the_thief_cannot_meet(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _publish(delivery)
    # at 5 s, 1,000 tokens at 20 tok/s take 50 s: 55 s > the tail's 50 s deadline, and b is on time
    assert delivery.steal("s", "a", 2, now_ms=T0 + 5_000, rate_tokens_per_s=20.0) == []
    assert delivery.progress("s").workers["b"].queued == 5
    assert_sound(redis_client, "s")  # the refused item stays queued, nowhere else
    # at 60 tok/s (16.7 s) the tail is in time even at 4x its length (71.7 <= 40 + 4 x 10 s), the
    # item before it is not (71.7 > 30 + 4 x 10 s)
    stolen = delivery.steal("s", "a", 2, now_ms=T0 + 5_000, rate_tokens_per_s=60.0)
    assert [le.key for le in stolen] == ["b-4#0"]
    assert_sound(redis_client, "s")


def test_a_thief_that_wins_only_at_the_predicted_length_is_refused(delivery: Delivery) -> None:
    _publish(delivery)
    # at 30 tok/s the thief ends the tail at 38.3 s, before its 50 s deadline; but it is three times
    # slower than the owner (33 s against 10 s), so were the item four times longer it would end at
    # 138 s against the owner's 80 s: an under-predicted tail on a slow thief is what a step waits for
    assert delivery.steal("s", "a", 2, now_ms=T0 + 5_000, rate_tokens_per_s=30.0) == []


def test_an_owner_behind_schedule_is_still_robbed(delivery: Delivery, redis_client: redis.Redis) -> None:
    _publish(delivery)
    # at 40 s the owner has not started its head (planned at 10 s): 30 s late, so its tail runs from
    # 70 s to 80 s; the thief ends it at 56.7 s (an on-time owner's 50 s deadline would refuse it)
    stolen = delivery.steal("s", "a", 2, now_ms=T0 + 40_000, rate_tokens_per_s=60.0)
    assert [le.key for le in stolen] == ["b-4#0"]
    assert_sound(redis_client, "s")


def test_without_a_rate_or_a_deadline_a_steal_is_not_time_guarded(delivery: Delivery) -> None:
    _publish(delivery)
    assert len(delivery.steal("s", "a", 2, now_ms=T0 + 5_000)) == 2  # no rate: as before the guard
    delivery.publish(PublishedSchedule("t", {"a": (), "b": tuple(item(f"b-{i}#0") for i in range(4))}))
    assert len(delivery.steal("t", "a", 2, rate_tokens_per_s=0.001)) == 2  # no deadlines: as before


def test_under_prefix_affinity_a_group_moves_only_if_every_member_meets_its_deadline(
    delivery: Delivery,
) -> None:
    queue = (
        _planned("p#0", 1_000.0, 0, 10_000),
        _planned("q#0", 100.0, 10_000, 60_000),
        _planned("q#1", 1_000.0, 10_000, 20_000),
    )
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True), now_ms=T0)
    # q#0 would be in time (4 s <= 60 s) but q#1 not (40 s > 20 s): the group stays whole on b
    assert delivery.steal("s", "a", 2, now_ms=T0, rate_tokens_per_s=25.0) == []
    assert len(delivery.steal("s", "a", 2, now_ms=T0, rate_tokens_per_s=100.0)) == 2


def test_the_publisher_gives_each_planned_item_its_predicted_end_on_its_worker() -> None:
    model = model_preset("7b")
    workers = (Worker("a", device_profile("H100"), max_num_seqs=2),)
    trajs = [Trajectory(f"p{i}", 0, 100, 4_096, 500.0 * (i + 1)) for i in range(3)]
    plan = Plan("test", (WorkerPlan("a", tuple(t.key for t in trajs), 0.0),), 0.0, 0.0, "TEST", 0.0)
    schedule = schedule_from_plan(
        "s", plan, trajs, inventory=Inventory(workers, model), engine=SERVICE_ENGINE
    )
    queue = schedule.queues["a"]
    assert [it.planned_start_ms for it in queue][:2] == [0, 0]  # two slots: the first two start at once
    deadlines = [it.deadline_ms for it in queue]
    assert all(d is not None and d > 0 for d in deadlines)
    assert queue[2].planned_start_ms == deadlines[0]  # the third starts when the first ends
    assert all(
        it.deadline_ms is None
        for it in schedule_from_plan("s", plan, trajs, engine=SERVICE_ENGINE).queues["a"]
    )


def test_a_thief_whose_held_work_ends_after_the_deadline_does_not_steal(delivery: Delivery) -> None:
    _publish(delivery)
    # at 5 s the tail (due at 50 s) would take 10 s at 100 tok/s, but the thief's own work runs
    # another 50 s: it would end the step later than the owner, so it takes nothing...
    assert delivery.steal("s", "a", 2, now_ms=T0 + 5_000, rate_tokens_per_s=100.0, busy_ms=50_000) == []
    # ...while with 40 s of its own left (45 s <= 50 s) it takes the tail
    stolen = delivery.steal("s", "a", 2, now_ms=T0 + 5_000, rate_tokens_per_s=100.0, busy_ms=40_000)
    assert [le.key for le in stolen] == ["b-4#0"]


def test_a_stalled_owner_is_robbed_even_by_a_slow_thief(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _publish(delivery)
    # 20 tok/s: 50 s an item, five times the owner's planned 10 s. While b is late by less than a
    # lease TTL (30 s) the shift model protects it, and the refusal does not change with time...
    for at in (5_000, 20_000, 39_000):
        assert delivery.steal("s", "a", 2, now_ms=T0 + at, rate_tokens_per_s=20.0) == []
    # ...but once b has run nothing of the schedule for longer than a lease TTL past its head's
    # planned start (engine dead, sidecar gone), any thief helps: it takes the tail
    stolen = delivery.steal("s", "a", 2, now_ms=T0 + 41_000, rate_tokens_per_s=20.0)
    assert [le.key for le in stolen] == ["b-4#0", "b-3#0"]
    assert_sound(redis_client, "s")


def test_an_overdue_owner_that_still_runs_items_keeps_the_guard(delivery: Delivery) -> None:
    _publish(delivery)
    assert len(delivery.claim("s", "b", 1, now_ms=T0 + 10_000)) == 1  # b runs its head: alive
    # b's next head was due at 10 s: 31 s late at 41 s, but it is working, so the shift holds
    assert delivery.steal("s", "a", 2, now_ms=T0 + 41_000, rate_tokens_per_s=20.0) == []


def _crowded() -> tuple[Plan, list[Trajectory], Inventory]:
    """One worker whose cache holds three of its eight items at predicted length: it evicts."""
    trajs = [Trajectory(f"p{i}", 0, 200, 4096, 900.0 + 50 * i) for i in range(8)]
    worker = Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=3_500)
    plan = Plan("lpt", (WorkerPlan("w", tuple(t.key for t in trajs), 60.0),), 60.0, 1.0, "HEURISTIC", 0.0)
    return plan, trajs, Inventory((worker,), model_preset("7b"))


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000.0))  # the publisher's rounding: never before the plan's


def _deadlines(published: PublishedSchedule) -> list[tuple[int | None, int | None]]:
    return [(it.planned_start_ms, it.deadline_ms) for it in published.queues["w"]]


def test_the_deadlines_are_played_by_the_rules_of_the_engine_the_plan_is_published_for() -> None:
    """As the simulator plays its steal deadlines by its engine's rules: on vLLM V1 an evicted item
    keeps its output, so the queue ends sooner than V0's restarts would have it."""
    plan, trajs, inventory = _crowded()
    by_v0 = schedule_from_plan("s", plan, trajs, inventory=inventory, engine="vllm-v0")
    by_v1 = schedule_from_plan("s", plan, trajs, inventory=inventory, engine="vllm-v1")
    rules = engine_rules("vllm-v1")
    played = planned_times(
        plan,
        trajs,
        inventory,
        kv_admission=False,
        watermark=rules.watermark,
        resume_preempted=rules.resume_preempted,
    )
    assert _deadlines(by_v1) == [(_ms(played[t.key].start_s), _ms(played[t.key].end_s)) for t in trajs]
    assert max(end or 0 for _, end in _deadlines(by_v1)) < max(end or 0 for _, end in _deadlines(by_v0))
