"""A failed item's next attempt goes to another worker that may take it, not back to the one that
failed it: a failure specific to one worker (a shorter context, a bad GPU, a worker that drops
items) must not spend every attempt there and dead-letter an item any other worker could run.
A lapsed lease (a silent worker) stays with its holder: thieves reach a dead worker's queue."""

from __future__ import annotations

from dataclasses import replace

import redis

from service.delivery import Delivery, PublishedSchedule, ReleaseOutcome
from service.delivery.keys import schedule_keys
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item, schedule

T0 = 1_000_000  # explicit clock (ms)
TTL = 10_000  # the schedules' lease TTL (conftest's default)


def _seen(delivery: Delivery, *workers: str, at: int = T0) -> None:
    """Each worker polls once with nothing to take (alive, idle)."""
    for w in workers:
        assert delivery.claim("s", w, 1, now_ms=at) == []


def test_a_worker_that_fails_an_item_does_not_get_it_back_another_worker_claims_it_next(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0}), now_ms=T0)
    _seen(delivery, "b")
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 1) is ReleaseOutcome.REQUEUED
    assert delivery.claim("s", "a", 1, now_ms=T0 + 2) == []
    (again,) = delivery.claim("s", "b", 1, now_ms=T0 + 2)
    assert (again.key, again.worker_id, again.attempt) == (lease.key, "b", 2)
    progress = delivery.progress("s")
    assert (progress.workers["a"].queued, progress.workers["b"].running) == (0, 1)
    assert_sound(redis_client, "s")


def test_the_next_attempt_goes_to_the_head_of_the_queue_with_the_least_predicted_work(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 3, "c": 2}), now_ms=T0)
    delivery.claim("s", "b", 1, now_ms=T0)  # b keeps 2 items queued, c 1 after its claim
    delivery.claim("s", "c", 1, now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "bad gpu", now_ms=T0 + 1)
    (head,) = delivery.claim("s", "c", 1, now_ms=T0 + 2)  # ahead of c's own planned item
    assert (head.key, head.attempt) == (lease.key, 2)
    assert_sound(redis_client, "s")


def test_a_worker_that_failed_an_item_does_not_steal_it_back_from_where_its_retry_went(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Seen in a live soak: a pull worker dropped an item twice, and the third attempt, sent to the
    head of a busy worker's otherwise empty queue, was stolen straight back by the idle worker that
    had just failed it, and dead-lettered there while two workers had never tried it."""
    delivery.publish(schedule("s", {"a": 1, "b": 1, "c": 0}), now_ms=T0)
    delivery.claim("s", "b", 1, now_ms=T0)  # b runs its own item: its queue is empty, its slots busy
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    _seen(delivery, "c")
    delivery.fail(lease, "held 8s by the pull worker without /done or /fail", now_ms=T0 + 1)
    assert delivery.progress("s").workers["b"].queued == 1  # the retry went to the head of b's queue
    assert delivery.steal("s", "a", 4, now_ms=T0 + 2) == []  # a failed it: it may not take it back
    (again,) = delivery.steal("s", "c", 4, now_ms=T0 + 3)  # any other idle worker may
    assert (again.key, again.worker_id, again.attempt) == (lease.key, "c", 2)
    assert_sound(redis_client, "s")


def test_three_attempts_run_on_three_different_workers_before_the_item_is_dead_lettered(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0, "c": 0}), now_ms=T0)
    _seen(delivery, "b", "c")
    holders, now = [], T0
    (lease,) = delivery.claim("s", "a", 1, now_ms=now)
    while True:
        holders.append(lease.worker_id)
        now += 1
        if delivery.fail(lease, "fails here", now_ms=now) is ReleaseOutcome.DEAD_LETTERED:
            break
        (lease,) = [le for w in ("a", "b", "c") for le in delivery.claim("s", w, 1, now_ms=now)]
    assert sorted(holders) == ["a", "b", "c"]
    (dead,) = delivery.progress("s").dead_letters
    assert dead.attempts == 3
    assert_sound(redis_client, "s")


def test_with_every_other_worker_tried_the_item_goes_back_to_its_holder(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0}), now_ms=T0)
    _seen(delivery, "b")
    (first,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(first, "x", now_ms=T0 + 1)
    (second,) = delivery.claim("s", "b", 1, now_ms=T0 + 1)
    delivery.fail(second, "x", now_ms=T0 + 2)
    assert delivery.claim("s", "a", 1, now_ms=T0 + 3) == []  # a failed it already
    (third,) = delivery.claim("s", "b", 1, now_ms=T0 + 3)
    assert third.attempt == 3
    assert_sound(redis_client, "s")


def test_a_pinned_item_stays_with_its_worker_after_a_failure(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    pinned = replace(item("p#0"), pinned=True)
    delivery.publish(PublishedSchedule("s", {"a": (pinned,), "b": ()}), now_ms=T0)
    _seen(delivery, "b")
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "x", now_ms=T0 + 1)
    assert delivery.claim("s", "b", 1, now_ms=T0 + 2) == []
    assert delivery.steal("s", "b", 1, now_ms=T0 + 2) == []
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + 2)
    assert (again.key, again.attempt) == ("p#0", 2)
    assert_sound(redis_client, "s")


def test_the_next_attempt_goes_only_to_a_worker_whose_cache_holds_the_item(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    big = item("big#0")  # 32 + 4,096 tokens at its cap
    queues = {"a": (big,), "b": (), "c": (item("c#0"), item("c#1"))}
    published = PublishedSchedule("s", queues, kv_capacity_tokens={"b": 1_000})
    delivery.publish(published, now_ms=T0)
    _seen(delivery, "b")
    delivery.claim("s", "c", 1, now_ms=T0)  # c is busier than b, but it holds big#0
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "x", now_ms=T0 + 1)
    assert delivery.claim("s", "b", 1, now_ms=T0 + 2) == []
    (again,) = delivery.claim("s", "c", 1, now_ms=T0 + 2)
    assert again.key == "big#0"
    assert_sound(redis_client, "s")


def test_a_worker_not_seen_within_a_lease_ttl_gets_no_retry_the_holder_keeps_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0, "c": 0}), now_ms=T0)
    _seen(delivery, "b")  # c never polled: not started, stopped, or drained
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0 + 2 * TTL)  # b went silent since
    delivery.fail(lease, "x", now_ms=T0 + 2 * TTL + 1)
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + 2 * TTL + 2)
    assert (again.key, again.attempt) == (lease.key, 2)
    assert_sound(redis_client, "s")


def test_a_lapsed_lease_goes_back_to_its_holder_not_to_another_worker(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    _seen(delivery, "b", at=T0 + TTL + 1)
    assert delivery.reap("s", now_ms=T0 + TTL + 1).requeued == 1
    assert delivery.claim("s", "b", 1, now_ms=T0 + TTL + 2) == []  # b steals it only once a stays silent
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + TTL + 2)
    assert (again.key, again.attempt) == (lease.key, 2)
    assert_sound(redis_client, "s")


def test_the_retry_records_expire_with_the_schedule(delivery: Delivery, redis_client: redis.Redis) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 0}), now_ms=T0)
    _seen(delivery, "b")
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "x", now_ms=T0 + 1)
    keys = schedule_keys("s")
    assert redis_client.hgetall(keys.tried) == {lease.key: "a"}
    assert redis_client.pttl(keys.tried) > 0
    assert redis_client.pttl(keys.seen) > 0
