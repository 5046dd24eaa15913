"""What a steal takes: the busiest queue by predicted seconds, from its tail, at most half of it, only
what the thief's slots and KV budget hold; a worker with work queued steals nothing."""

from __future__ import annotations

import pytest
import redis

from scheduler.errors import InvalidInputError
from service.delivery import Delivery, DeliveryItem, PublishedSchedule, UnknownScheduleError
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item, schedule


def test_steal_takes_from_the_tail_of_the_busiest_queue(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 0, "b": 6, "c": 2}))
    stolen = delivery.steal("s", "a", 10)
    assert [le.key for le in stolen] == ["b-5#0", "b-4#0", "b-3#0"]  # at most half, from the tail
    assert all(le.worker_id == "a" for le in stolen)
    progress = delivery.progress("s")
    assert (progress.workers["a"].running, progress.workers["b"].queued) == (3, 3)
    assert [le.key for le in delivery.claim("s", "b", 9)] == ["b-0#0", "b-1#0", "b-2#0"]


def _sized(key: str, prompt: int, predicted: float) -> DeliveryItem:
    """An item reserving ``prompt + predicted`` KV tokens (predicted below its 4,096 cap)."""
    return DeliveryItem(key, key.partition("#")[0], 0, prompt, 4096, predicted)


def test_steal_takes_tail_items_only_while_their_reservations_fit_the_kv_budget(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queue = tuple(_sized(f"b-{i}#0", 100, 900.0) for i in range(8))  # 1,000 tokens each
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    stolen = delivery.steal("s", "a", 4, budget_tokens=2_500)
    assert [le.key for le in stolen] == ["b-7#0", "b-6#0"]  # a third (3,000 tokens) would not fit
    assert delivery.progress("s").workers["b"].queued == 6
    assert_sound(redis_client, "s")


def test_steal_refuses_a_tail_item_larger_than_the_budget_and_leaves_it_queued(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queue = (_sized("b-0#0", 100, 400.0), _sized("b-1#0", 300, 2_000.4))  # tail reserves 2,301
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    assert delivery.steal("s", "a", 4, budget_tokens=2_300) == []
    assert delivery.steal("s", "a", 4, budget_tokens=-5) == []  # an oversubscribed thief takes nothing
    progress = delivery.progress("s")
    assert (progress.queued, progress.running, progress.workers["a"].running) == (2, 0, 0)
    assert_sound(redis_client, "s")  # never both queued and leased: the refused item is queued, nowhere else
    assert [le.key for le in delivery.steal("s", "a", 4, budget_tokens=2_301)] == ["b-1#0"]
    assert [le.key for le in delivery.claim("s", "b", 4)] == ["b-0#0"]
    assert_sound(redis_client, "s")


def test_a_steal_without_a_budget_is_limited_by_slots_alone(delivery: Delivery) -> None:
    queue = tuple(_sized(f"b-{i}#0", 100, 4_000.0) for i in range(4))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    assert len(delivery.steal("s", "a", 2)) == 2


def test_the_victim_is_ranked_by_predicted_seconds_not_tokens(delivery: Delivery) -> None:
    fast = tuple(item(f"fast-{i}#0", 1000.0) for i in range(4))  # 4,000 tokens at 1 ms: 4 s
    slow = tuple(item(f"slow-{i}#0", 100.0) for i in range(4))  # 400 tokens at 20 ms: 8 s
    paces = {"fast": 0.001, "slow": 0.02}
    delivery.publish(PublishedSchedule("s", {"a": (), "fast": fast, "slow": slow}, seconds_per_token=paces))
    assert [le.key for le in delivery.steal("s", "a", 1)] == ["slow-3#0"]
    delivery.claim("s", "slow", 2)  # slow keeps 1 item = 2 s: fast (4 s) is now the busier queue
    assert [le.key for le in delivery.steal("s", "a", 1)] == ["fast-3#0"]


def test_a_pace_that_is_not_positive_or_names_no_queue_is_refused(delivery: Delivery) -> None:
    for paces, field in (({"a": 0.0}, "seconds_per_token[a]"), ({"zz": 1.0}, "seconds_per_token")):
        with pytest.raises(InvalidInputError) as err:
            delivery.publish(PublishedSchedule("s", {"a": (item("a-0#0"),)}, seconds_per_token=paces))
        assert err.value.field == field
    with pytest.raises(UnknownScheduleError):
        delivery.info("s")


def test_a_worker_with_queued_work_cannot_steal(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 6}))
    assert delivery.steal("s", "a", 3) == []
