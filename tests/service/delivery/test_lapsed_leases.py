"""A lease whose deadline passed, met by its holder's late calls, by a thief, or by both at once.

Expiry depends on time alone: whichever call meets a lapsed lease first (heartbeat, completion,
release, fail) expires it on the spot, and from then on the item belongs to whoever leases it next,
so a late holder and the worker that took the item over never both have a result accepted.
"""

from __future__ import annotations

import pytest
import redis

from service.delivery import CompletionOutcome, Delivery, ReleaseOutcome
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

T0 = 1_000_000  # explicit clock (ms) so expiry is deterministic


def test_a_release_that_meets_a_lapsed_lease_expires_it_on_the_spot_and_spends_the_attempt(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A graceful release refunds the attempt only for a lease still held: one that lapsed (the
    sidecar was paused past its TTL) is an expiry like any other, whether or not a reaper ran."""
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=1000), now_ms=T0)
    (lapsed,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.release([lapsed], now_ms=T0 + 1001) == [ReleaseOutcome.STALE]
    progress = delivery.progress("s", now_ms=T0 + 1001)
    assert (progress.queued, progress.running) == (2, 0)  # back at once, not when a reaper runs
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + 1002)
    assert (again.key, again.attempt) == (lapsed.key, 2)  # at the head, its attempt spent
    assert_sound(redis_client, "s")


def test_a_fail_that_meets_a_lapsed_lease_dead_letters_it_once_its_attempts_are_spent(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1000, max_attempts=1), now_ms=T0)
    (lapsed,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lapsed, "engine error", now_ms=T0 + 1001) is ReleaseOutcome.STALE
    progress = delivery.progress("s", now_ms=T0 + 1001)
    assert (progress.running, progress.failed, progress.finished) == (0, 1, True)
    assert progress.dead_letters[0].reason == "lease expired after 1 attempt"  # it lapsed first
    assert delivery.active_schedules() == []  # the last item settled: the schedule left the index
    assert_sound(redis_client, "s")


@pytest.mark.parametrize(("max_attempts", "reason"), [(1, "after 1 attempt"), (2, "after 2 attempts")])
def test_a_dead_letter_for_lapsed_leases_counts_its_attempts_in_good_english(
    delivery: Delivery, max_attempts: int, reason: str
) -> None:
    # it read "lease expired after 1 attempts" with ROLLOUT_MAX_ATTEMPTS=1
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1000, max_attempts=max_attempts), now_ms=T0)
    now = T0
    for _ in range(max_attempts):
        assert len(delivery.claim("s", "a", 1, now_ms=now)) == 1
        now += 1001
        delivery.reap("s", now_ms=now)
    assert [d.reason for d in delivery.progress("s", now_ms=now).dead_letters] == [f"lease expired {reason}"]


def test_a_late_holder_and_the_thief_that_took_its_item_over_never_both_get_it_accepted(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """a's lease lapses (paused past its TTL) and is reaped back to the head of a's queue; b, idle,
    steals it. a wakes up and reports: whatever it sends (completion, its retry, a heartbeat, a
    release, a fail) finds the item b's and changes nothing; b's completion is the one accepted."""
    delivery.publish(schedule("s", {"a": 1, "b": 0}, ttl_ms=1000), now_ms=T0)
    (late,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.reap("s", now_ms=T0 + 1001).requeued == 1
    (taken,) = delivery.steal("s", "b", 1, now_ms=T0 + 1002)
    assert (taken.key, taken.worker_id, taken.attempt) == (late.key, "b", 2)

    assert delivery.complete(late, RESULT, now_ms=T0 + 1003) is CompletionOutcome.STALE
    assert delivery.complete_many("s", [(late.key, late.token, RESULT)], now_ms=T0 + 1003) == [
        CompletionOutcome.STALE  # without a worker id the token alone decides: a's is superseded
    ]
    assert delivery.heartbeat([late], now_ms=T0 + 1003) == []
    assert delivery.release([late], now_ms=T0 + 1003) == [ReleaseOutcome.STALE]
    assert delivery.fail(late, "engine error", now_ms=T0 + 1003) is ReleaseOutcome.STALE
    assert [le.deadline_ms for le in delivery.heartbeat([taken], now_ms=T0 + 1004)] == [T0 + 2004]

    assert delivery.complete(taken, RESULT, now_ms=T0 + 1005) is CompletionOutcome.ACCEPTED
    assert delivery.complete(late, RESULT, now_ms=T0 + 1006) is CompletionOutcome.STALE  # not DUPLICATE
    anyone = delivery.complete_many("s", [(late.key, late.token, RESULT)], now_ms=T0 + 1006)
    assert anyone == [CompletionOutcome.STALE]  # done, but under b's token: a's is no repeat of it
    assert delivery.complete(taken, RESULT, now_ms=T0 + 1006) is CompletionOutcome.DUPLICATE
    assert [(r.worker_id, r.token) for r in delivery.read_results("s")] == [("b", taken.token)]
    assert_sound(redis_client, "s")
