"""A failure is taken once per lease token, as a completion is: a failure report sent again because
its answer was lost is answered DUPLICATE (it landed) and changes nothing, so the sidecar can count
the lease ``failed`` once; a landed failure and a lapse leave the same ``P:st`` record, so before
``P:failed`` the repeat was STALE and the lease counted ``lost``. A lapse, another worker's report
and a token never failed stay STALE. The record expires with the schedule, and the release before it
(its ``release.lua`` from git) and this one work side by side on one schedule."""

from __future__ import annotations

import redis

from service.delivery import Delivery, ReleaseOutcome
from service.delivery.keys import schedule_keys
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule
from tests.service.delivery.old_release import PRE_FAILED, old_delivery

T0 = 1_000_000  # explicit clock (ms)
TTL = 10_000  # the schedules' lease TTL (conftest's default)


def _snapshot(client: redis.Redis) -> tuple[object, object, int]:
    """What a repeat must leave as it was: the item records, the counters and the dead letters."""
    keys = schedule_keys("s")
    return client.hgetall(keys.st), client.hgetall(keys.counts), client.llen(keys.dead)


def test_a_repeated_failure_report_is_a_duplicate_and_changes_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2, "b": 0}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 1) is ReleaseOutcome.REQUEUED
    before = _snapshot(redis_client)
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 2) is ReleaseOutcome.DUPLICATE
    by_key = delivery.fail_key("s", "a", lease.key, lease.token, "again", now_ms=T0 + 3)
    assert by_key is ReleaseOutcome.DUPLICATE
    assert _snapshot(redis_client) == before  # no second attempt spent, no second requeue
    assert_sound(redis_client, "s")


def test_the_repeat_is_a_duplicate_after_the_item_was_leased_and_failed_again(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (first,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(first, "one", now_ms=T0 + 1)
    (second,) = delivery.claim("s", "a", 1, now_ms=T0 + 2)  # its only worker: back to a
    assert delivery.fail(second, "two", now_ms=T0 + 3) is ReleaseOutcome.REQUEUED
    assert delivery.fail(first, "one", now_ms=T0 + 4) is ReleaseOutcome.DUPLICATE
    assert delivery.fail(second, "two", now_ms=T0 + 4) is ReleaseOutcome.DUPLICATE
    assert delivery.progress("s").workers["a"].queued == 1
    assert_sound(redis_client, "s")


def test_a_repeat_of_the_failure_that_dead_lettered_the_item_is_a_duplicate(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}, max_attempts=1), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lease, "bad", now_ms=T0 + 1) is ReleaseOutcome.DEAD_LETTERED
    assert delivery.fail(lease, "bad", now_ms=T0 + 2) is ReleaseOutcome.DUPLICATE
    assert len(delivery.progress("s").dead_letters) == 1
    assert_sound(redis_client, "s")


def test_a_lapse_another_workers_report_and_a_token_never_failed_stay_stale(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    failed, lapsed = delivery.claim("s", "a", 2, now_ms=T0)
    delivery.fail(failed, "bad", now_ms=T0 + 1)
    not_theirs = delivery.fail_key("s", "b", failed.key, failed.token, "not b's", now_ms=T0 + 2)
    assert not_theirs is ReleaseOutcome.STALE
    delivery.reap("s", now_ms=T0 + TTL + 1)  # the other lease lapses: requeued, no failure taken
    assert delivery.fail(lapsed, "late", now_ms=T0 + TTL + 2) is ReleaseOutcome.STALE
    unknown = delivery.fail_key("s", "a", failed.key, failed.token + 100, "never", now_ms=T0 + TTL + 3)
    assert unknown is ReleaseOutcome.STALE
    assert_sound(redis_client, "s")


def test_the_failure_record_expires_with_the_schedule(delivery: Delivery, redis_client: redis.Redis) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "bad", now_ms=T0 + 1)
    keys = schedule_keys("s")
    assert redis_client.hget(keys.failed, lease.key) == f"{lease.token}:a"
    assert redis_client.pexpiretime(keys.failed) == redis_client.pexpiretime(keys.meta) > 0


def test_the_release_before_and_this_one_side_by_side_on_one_schedule(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """An older sidecar runs its own release.lua: its repeats stay STALE as they were, its failures
    are not recorded (this release's repeat of one is STALE, as before), and a failure this release
    recorded changes nothing for the older script, which takes the next lease's failure as ever."""
    old = old_delivery(redis_client, PRE_FAILED)
    delivery.publish(schedule("s", {"a": 3}), now_ms=T0)
    by_old, by_new, third = delivery.claim("s", "a", 3, now_ms=T0)
    assert old.fail(by_old, "old", now_ms=T0 + 1) is ReleaseOutcome.REQUEUED
    assert delivery.fail(by_old, "old", now_ms=T0 + 2) is ReleaseOutcome.STALE  # no record: as before
    assert delivery.fail(by_new, "new", now_ms=T0 + 3) is ReleaseOutcome.REQUEUED
    assert old.fail(by_new, "new", now_ms=T0 + 4) is ReleaseOutcome.STALE  # the old answer, unchanged
    assert old.fail(third, "old", now_ms=T0 + 5) is ReleaseOutcome.REQUEUED
    (again,) = old.claim("s", "a", 1, now_ms=T0 + 6)  # the record does not stop the old claim
    assert delivery.fail(again, "new", now_ms=T0 + 7) is ReleaseOutcome.REQUEUED
    assert delivery.fail(again, "new", now_ms=T0 + 8) is ReleaseOutcome.DUPLICATE
    assert_sound(redis_client, "s")
