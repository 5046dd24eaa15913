"""``lua/planning.lua``'s first window: a mark lives the service's command timeout until its request,
holding the mark's answer, extends it to the request's whole TTL. A mark whose answer was lost (Redis
stalled, the write buffered and landing after the request's 503) then lapses that soon, and neither a
late extension nor a late copy of the mark gives it a longer life."""

from __future__ import annotations

import pytest
import redis

from service.delivery import Delivery, LateMarkError, keys

T0 = 1_000_000  # explicit clock (ms)
WINDOW_MS = 1_000  # the mark's first life, the service's command timeout


def test_an_extended_mark_lives_the_request_s_ttl_from_when_it_was_marked(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS, now_ms=T0)
    delivery.extend_planning("s", "r", ttl_ms=100_000, now_ms=T0 + 5)
    assert redis_client.hget(planning, "r") == f"{T0}:{T0 + 100_000}"
    assert 90_000 < redis_client.pttl(planning) <= 100_000


def test_an_extension_landing_past_the_window_is_refused_and_writes_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Its own answer may have been lost: the request that sent it may have answered 503 already."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS, now_ms=T0)
    before = (redis_client.hgetall(planning), redis_client.pexpiretime(planning))
    with pytest.raises(LateMarkError):
        delivery.extend_planning("s", "r", ttl_ms=100_000, now_ms=T0 + WINDOW_MS + 1)
    assert (redis_client.hgetall(planning), redis_client.pexpiretime(planning)) == before


def test_a_late_copy_of_the_mark_does_not_cut_the_extended_entry_back(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A try whose answer was lost, landing after the retry that was answered and extended."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS, now_ms=T0)
    delivery.extend_planning("s", "r", ttl_ms=100_000, now_ms=T0 + 5)
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS, now_ms=T0 + 10)
    assert redis_client.hget(planning, "r") == f"{T0}:{T0 + 100_000}"
    assert redis_client.pttl(planning) > 90_000


def test_an_extension_after_a_delete_withdrew_the_id_is_no_error_and_writes_no_mark(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The request goes on to its publish, which the withdrawal refuses (409), as before the window."""
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS)
    delivery.cancel("s", withdraw_s=60)
    delivery.extend_planning("s", "r", ttl_ms=100_000)
    assert redis_client.exists(keys.schedule_keys("s").planning) == 0


def test_an_extension_of_an_entry_gone_unwithdrawn_is_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The window passed and the key lapsed: a DELETE meanwhile was a 404, so the request must not publish."""
    with pytest.raises(LateMarkError):
        delivery.extend_planning("s", "r", ttl_ms=100_000)
    assert redis_client.exists(keys.schedule_keys("s").planning) == 0
