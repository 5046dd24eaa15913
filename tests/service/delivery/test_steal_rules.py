"""Steals honour what the simulator honours (scheduler/sim_pool.py): pins and prefix affinity."""

from __future__ import annotations

import dataclasses

import redis

from scheduler.sim_steal import STEAL_SCAN
from service.delivery import Delivery, DeliveryItem, PublishedSchedule
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item


def _pin(it: DeliveryItem) -> DeliveryItem:
    return dataclasses.replace(it, pinned=True)


def _group(prompt: str, n: int, predicted: float = 100.0) -> tuple[DeliveryItem, ...]:
    """``n`` samples of one prompt: one prefix-sharing group."""
    return tuple(item(f"{prompt}#{i}", predicted) for i in range(n))


def _commands(client: redis.Redis) -> int:
    """Commands the server has run so far (scripts' calls included), from INFO commandstats."""
    return sum(int(stat["calls"]) for stat in client.info("commandstats").values())


def test_a_pinned_tail_item_stays_and_the_thief_takes_the_unpinned_items_before_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queue = (*(item(f"b-{i}#0") for i in range(5)), _pin(item("b-5#0")))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["b-4#0", "b-3#0", "b-2#0"]  # half of 6
    assert [le.key for le in delivery.claim("s", "b", 9)] == ["b-0#0", "b-1#0", "b-5#0"]
    assert_sound(redis_client, "s")


def test_a_steal_passes_over_a_pinned_item_and_takes_the_nearest_ones_before_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queue = tuple(item(f"b-{i}#0") for i in range(8))
    queue = (*queue[:6], _pin(queue[6]), queue[7])
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["b-7#0", "b-5#0", "b-4#0", "b-3#0"]
    assert [le.key for le in delivery.claim("s", "b", 9)] == ["b-0#0", "b-1#0", "b-2#0", "b-6#0"]
    assert_sound(redis_client, "s")


def test_a_queue_ending_in_a_pinned_group_gives_thieves_every_unpinned_item(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # a live walk: a dead worker's pinned group planned last kept all 26 of its items queued while
    # every other worker idled; the step waits for the pins anyway, but for 8 items, not 26
    queue = (*(item(f"b-{i}#0") for i in range(18)), *(_pin(item(f"p-{i}#0")) for i in range(8)))
    thieves = {f"t{n}": () for n in range(6)}
    delivery.publish(PublishedSchedule("s", {"b": queue, **thieves}))
    stolen = [le.key for t in thieves for le in delivery.steal("s", t, 4)]
    assert sorted(stolen) == sorted(f"b-{i}#0" for i in range(18))
    assert [le.key for le in delivery.claim("s", "b", 9)] == [f"p-{i}#0" for i in range(8)]
    assert_sound(redis_client, "s")


def test_a_steal_passes_any_number_of_pinned_items_at_a_cost_that_does_not_grow_with_them(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # a user pinned a hundred short prompts to a slow worker, planned last: the steal looked at most
    # SCAN (64) items from the tail, so the 200 unpinned items before them stayed with their owner
    for pins in (STEAL_SCAN, 2_000):
        queue = (*(item(f"b-{i}#0") for i in range(3)), *(_pin(item(f"p-{i}#0")) for i in range(pins)))
        delivery.publish(PublishedSchedule(f"s{pins}", {"a": (), "b": queue}))
        before = _commands(redis_client)
        assert [le.key for le in delivery.steal(f"s{pins}", "a", 2)] == ["b-2#0", "b-1#0"]
        assert _commands(redis_client) - before < 60  # the same at 64 pins and at 2,000
        assert_sound(redis_client, f"s{pins}")


def test_the_scan_bound_counts_passed_over_items_not_the_items_a_steal_takes(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # a steal takes half the victim's queue, at most max_items; bounding the whole walk by SCAN had
    # cut every steal to 64 items, so an idle thief with 150 free slots filled them in three polls
    queue = (*(item(f"b-{i}#0") for i in range(400)), *(_pin(item(f"p-{i}#0")) for i in range(3)))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    assert [le.key for le in delivery.steal("s", "a", 150)] == [f"b-{i}#0" for i in range(399, 249, -1)]
    assert_sound(redis_client, "s")


def test_a_queue_holding_pins_keeps_its_unpinned_index_through_claims_requeues_and_steals(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    pins = tuple(_pin(item(f"p-{i}#0")) for i in range(1, 80))
    queue = (item("b-0#0"), _pin(item("p-0#0")), item("b-1#0"), *pins)
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue, "c": (item("c-0#0"),)}))
    held = delivery.claim("s", "b", 2)  # b-0 and p-0 leave the head of the queue and of its index
    assert_sound(redis_client, "s")
    delivery.release(held)  # back to the head, b-0 into the index again
    assert_sound(redis_client, "s")
    assert [le.key for le in delivery.steal("s", "a", 1)] == ["b-1#0"]
    assert [le.key for le in delivery.steal("s", "c", 4)] == []  # c still has its own queue
    assert [le.key for le in delivery.claim("s", "c", 4)] == ["c-0#0"]
    assert [le.key for le in delivery.steal("s", "c", 4)] == ["b-0#0"]
    assert [le.key for le in delivery.steal("s", "a", 4)] == []  # nothing but pins is left
    assert_sound(redis_client, "s")


def test_a_pinned_item_survives_a_round_trip_through_redis(delivery: Delivery) -> None:
    delivery.publish(PublishedSchedule("s", {"b": (_pin(item("b-0#0")),)}))
    assert delivery.claim("s", "b", 1)[0].item.pinned


def test_under_prefix_affinity_a_steal_moves_the_tail_items_whole_group(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queue = (*_group("p", 2, 900.0), *_group("q", 3))  # group q (3 samples) is at the tail
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True))
    stolen = delivery.steal("s", "a", 2)
    assert [le.key for le in stolen] == ["q#0", "q#1"]  # up to the thief's slots now...
    progress = delivery.progress("s")
    assert (progress.workers["a"].queued, progress.workers["b"].queued) == (1, 2)  # ...the rest queued on a
    assert [le.key for le in delivery.claim("s", "a", 5)] == ["q#2"]
    assert [le.key for le in delivery.claim("s", "b", 5)] == ["p#0", "p#1"]
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_group_started_on_its_owner_stays(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(PublishedSchedule("s", {"a": (), "b": _group("q", 3)}, prefix_affinity=True))
    delivery.claim("s", "b", 1)  # q#0 runs on b: q#1 and q#2 must follow it there
    assert delivery.steal("s", "a", 4) == []
    assert delivery.progress("s").workers["b"].queued == 2
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_group_moves_only_if_all_of_it_fits_the_kv_budget(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(PublishedSchedule("s", {"a": (), "b": _group("q", 3)}, prefix_affinity=True))
    assert delivery.steal("s", "a", 4, budget_tokens=3 * 132 - 1) == []  # each reserves 32 + 100
    assert [le.key for le in delivery.steal("s", "a", 4, budget_tokens=3 * 132)] == ["q#0", "q#1", "q#2"]
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_group_with_a_pinned_sample_stays(delivery: Delivery) -> None:
    queue = (*_group("q", 2), _pin(item("q#2")), item("q#3"))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True))
    assert delivery.steal("s", "a", 4) == []


def test_a_busiest_queue_with_nothing_but_pins_sends_the_thief_to_the_next(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    busiest = (_pin(item("b-0#0", 900.0)), _pin(item("b-1#0", 900.0)))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": busiest, "c": (item("c-0#0"), item("c-1#0"))}))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["c-1#0"]
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_queue_of_groups_that_cannot_move_sends_the_thief_to_the_next(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    q0, q1 = _group("q", 2, 900.0)  # split over b and c: the group at b's tail can never move whole
    q1 = dataclasses.replace(q1, predicted_tokens=2_000.0)  # b is the busiest
    queues = {"a": (), "b": (q1,), "c": (q0, *_group("r", 2))}
    delivery.publish(PublishedSchedule("s", queues, prefix_affinity=True))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["r#0", "r#1"]
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_thief_passes_a_group_that_cannot_move_for_the_group_before_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    q0, q1 = _group("q", 2, 900.0)  # split over b and c: the group at b's tail can never move whole
    queues = {"a": (), "b": (*_group("p", 2, 900.0), q1), "c": (q0, *_group("r", 2))}
    delivery.publish(PublishedSchedule("s", queues, prefix_affinity=True))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["p#0", "p#1"]
    assert [le.key for le in delivery.claim("s", "b", 4)] == ["q#1"]
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_pinned_group_at_the_tail_leaves_the_groups_before_it_stealable(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    pinned = tuple(_pin(it) for it in _group("z", 3))
    queue = (*_group("p", 2), *_group("q", 3), *pinned)
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["q#0", "q#1", "q#2"]
    assert [le.key for le in delivery.claim("s", "b", 9)] == ["p#0", "p#1", "z#0", "z#1", "z#2"]
    assert_sound(redis_client, "s")


def test_a_resent_steal_answers_its_leases_after_a_claim_took_the_rest_of_its_group(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # The sidecar's order after a steal whose reply was lost: its next round claims first (a fresh
    # call id), which leases the rest of the stolen group off its own queue, then re-sends the steal.
    queue = (*_group("p", 2, 900.0), *_group("q", 3))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True))
    lost = delivery.steal("s", "a", 2, call_id="steal-1")
    assert [le.key for le in delivery.claim("s", "a", 2, call_id="claim-1")] == ["q#2"]
    again = delivery.steal("s", "a", 2, call_id="steal-1")
    assert [(le.key, le.token) for le in again] == [(le.key, le.token) for le in lost]
    assert delivery.progress("s").workers["b"].queued == 2  # nothing more stolen
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_steal_reads_the_tail_group_not_the_whole_queue(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # Idle thieves retry every idle poll; a steal that read the group of every queued item blocked
    # Redis 14 ms at 2,048 queued. Its cost must stay that of the group, however long the queue.
    queue = tuple(it for g in range(500) for it in _group(f"p{g}", 4))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}, prefix_affinity=True))
    before = _commands(redis_client)
    assert [le.key for le in delivery.steal("s", "a", 4)] == [f"p499#{i}" for i in range(4)]
    assert _commands(redis_client) - before < 100  # was over 2,000: one HGET per queued item
    assert_sound(redis_client, "s")


def test_under_prefix_affinity_a_whole_group_interleaved_with_another_still_moves(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    p0, p1 = _group("p", 2)
    q0, q1 = _group("q", 2)
    delivery.publish(PublishedSchedule("s", {"a": (), "b": (p0, q0, p1, q1)}, prefix_affinity=True))
    assert [le.key for le in delivery.steal("s", "a", 4)] == ["q#0", "q#1"]
    assert_sound(redis_client, "s")
