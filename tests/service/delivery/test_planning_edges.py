"""``lua/planning.lua``'s take-back of an entry that is not there (the request published, was
withdrawn, or its entry lapsed) writes nothing: the key keeps the expiry the marks gave it, though
the take-back's clock says the entries left have less of their lifetime left."""

from __future__ import annotations

import redis

from service.delivery import Delivery, keys

T0 = 1_000_000  # explicit clock (ms)


def test_a_take_back_of_an_entry_not_there_leaves_the_others_expiry_as_it_is(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "running", ttl_ms=100_000, now_ms=T0)
    before = redis_client.hgetall(planning)
    delivery.unmark_planning("s", "published-already", now_ms=T0 + 50_000)
    assert redis_client.hgetall(planning) == before
    assert redis_client.pttl(planning) > 90_000  # not cut to the 50 s the entry has left on that clock
