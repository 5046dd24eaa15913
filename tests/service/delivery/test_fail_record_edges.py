"""``P:failed`` answers only a repeated failure report: ``DUPLICATE`` is a ``fail`` answer alone
(``ReleaseOutcome.DUPLICATE``). A hand-back (``release``, or ``died`` at a reset) of a lease whose
failure was taken is not held any more and is ``STALE``, as before the record: a hand-back's repeat is
answered by its own record (``P:released``, ``test_release_record.py``), and a release answered
duplicate for a failure would count it ``released``, where the failure spent an attempt."""

from __future__ import annotations

import redis

from service.delivery import Delivery, ReleaseOutcome
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule

T0 = 1_000_000  # explicit clock (ms)


def test_a_hand_back_of_a_lease_whose_failure_was_taken_is_stale_not_a_duplicate(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 1) is ReleaseOutcome.REQUEUED
    assert delivery.release([lease], now_ms=T0 + 2) == [ReleaseOutcome.STALE]
    assert delivery.release([lease], now_ms=T0 + 3, died="its worker process") == [ReleaseOutcome.STALE]
    assert delivery.fail(lease, "engine refused it", now_ms=T0 + 4) is ReleaseOutcome.DUPLICATE
    assert_sound(redis_client, "s")
