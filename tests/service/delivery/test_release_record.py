"""A hand-back is taken once per token, as a completion and a failure are: a release sent again (its
answer lost: a sidecar's release at a drain when its schedule's master fails over, sent again to the
new master) is answered ``DUPLICATE`` where it requeued, and ``DEAD_LETTERED`` again where it
dead-lettered (``lua/release.lua``'s ``P:released``), and changes nothing. It was ``STALE``, which the
sidecar counts ``lost`` beside a lease that had gone back. The record answers only the worker whose
hand-back it was, and only a hand-back: a failure of a handed-back lease is ``STALE`` as before."""

from __future__ import annotations

from dataclasses import replace

import redis

from service.delivery import Delivery, ReleaseOutcome
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule

T0 = 1_000_000  # explicit clock (ms)
DIED = "its worker process"


def test_a_release_sent_again_is_a_duplicate_and_changes_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    leases = delivery.claim("s", "a", 2, now_ms=T0)
    assert delivery.release(leases, now_ms=T0 + 1) == [ReleaseOutcome.REQUEUED] * 2
    assert delivery.release(leases, now_ms=T0 + 2) == [ReleaseOutcome.DUPLICATE] * 2
    again = delivery.claim("s", "a", 2, now_ms=T0 + 3)
    assert [lease.attempt for lease in again] == [1, 1]  # one refund each, not two
    assert_sound(redis_client, "s")


def test_a_hand_back_sent_again_after_the_item_was_leased_again_is_still_a_duplicate(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    first = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.release(first, now_ms=T0 + 1) == [ReleaseOutcome.REQUEUED]
    second = delivery.claim("s", "a", 1, now_ms=T0 + 2)
    assert delivery.release(first, now_ms=T0 + 3) == [ReleaseOutcome.DUPLICATE]
    assert delivery.heartbeat(second, now_ms=T0 + 4) != []  # the new lease untouched, still held
    assert_sound(redis_client, "s")


def test_a_hand_back_that_dead_lettered_answers_dead_lettered_again(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """``died`` spends the attempt after the first refund; on the last one the item is buried, and the
    repeat answers that again: the sidecar counts it ``failed`` (and the ``/reset``'s dead), not
    ``released``."""
    delivery.publish(schedule("s", {"a": 1}, max_attempts=1), now_ms=T0)
    first = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.release(first, now_ms=T0 + 1, died=DIED) == [ReleaseOutcome.REQUEUED]  # refunded
    second = delivery.claim("s", "a", 1, now_ms=T0 + 2)
    assert delivery.release(second, now_ms=T0 + 3, died=DIED) == [ReleaseOutcome.DEAD_LETTERED]
    assert delivery.release(second, now_ms=T0 + 4, died=DIED) == [ReleaseOutcome.DEAD_LETTERED]
    assert redis_client.llen(delivery.keys("s").dead) == 1  # buried once
    assert_sound(redis_client, "s")


def test_the_record_answers_only_its_own_worker_and_only_a_hand_back(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.release([lease], now_ms=T0 + 1) == [ReleaseOutcome.REQUEUED]
    assert delivery.release([replace(lease, worker_id="b")], now_ms=T0 + 2) == [ReleaseOutcome.STALE]
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 3) is ReleaseOutcome.STALE
    assert_sound(redis_client, "s")


def test_the_hand_back_record_expires_with_the_schedule(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.release([lease], now_ms=T0 + 1)
    keys = delivery.keys("s")
    assert redis_client.hget(keys.released, lease.key) == f"{lease.token}:a:1"
    assert redis_client.pexpiretime(keys.released) == redis_client.pexpiretime(keys.meta) > 0
