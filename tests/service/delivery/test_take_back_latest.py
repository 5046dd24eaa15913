"""A request's take-back of its in-flight mark (``lua/planning.lua``'s unmark) leaves the mark the
latest deadline of every entry left, wherever that entry sits in the hash: the mark of a request that
came first and lives longest is not cut to the life of one that came after it (mutants60). Real
Redis, explicit clock."""

from __future__ import annotations

import redis

from service.delivery import Delivery, keys

T0 = 1_000_000  # explicit clock (ms) so expiry is deterministic


def test_a_take_back_keeps_the_longest_life_left_though_a_shorter_one_came_after_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "long", ttl_ms=100_000, now_ms=T0)
    delivery.mark_planning("s", "short", ttl_ms=1_000, now_ms=T0)
    delivery.mark_planning("s", "refused", ttl_ms=50_000, now_ms=T0)
    delivery.unmark_planning("s", "refused", now_ms=T0 + 500)
    assert sorted(redis_client.hkeys(planning)) == ["long", "short"]
    assert 90_000 < redis_client.pttl(planning) <= 99_500
