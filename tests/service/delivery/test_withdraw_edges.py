"""``Delivery.cancel`` of an id in flight withdraws it only when asked to (``withdraw_s``, the API
passes the retention): a cancel not asked to is the plain "unknown schedule" it was, and writes
nothing, the request's in-flight mark left as it was."""

from __future__ import annotations

import pytest
import redis

from service.delivery import Delivery, UnknownScheduleError, keys


def test_a_cancel_not_asked_to_withdraw_leaves_an_id_in_flight_unknown_and_untouched(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.mark_planning("s", "request-1", ttl_ms=60_000)
    k = keys.schedule_keys("s")
    before = redis_client.hgetall(k.planning)
    with pytest.raises(UnknownScheduleError):
        delivery.cancel("s")
    assert (redis_client.hgetall(k.planning), redis_client.exists(k.withdrawn)) == (before, 0)
