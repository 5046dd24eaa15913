"""``lua/planning.lua``'s extension at its edges: one landing exactly at the mark's
deadline is in time, as Redis keeps a key until its expiry time is past (the mark's key lives to that
millisecond too, so a DELETE then still finds the id planned); and a shorter extension never cuts
the key's life below a longer entry's. Kills mutants that survived round 46's tests (helper
mutants10, docs/experiments.md)."""

from __future__ import annotations

import redis

from service.delivery import Delivery, keys

T0 = 1_000_000  # explicit clock (ms)
WINDOW_MS = 1_000  # the mark's first life, the service's command timeout


def test_an_extension_landing_at_the_window_s_last_millisecond_is_in_time(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "r", ttl_ms=WINDOW_MS, now_ms=T0)
    delivery.extend_planning("s", "r", ttl_ms=100_000, now_ms=T0 + WINDOW_MS)
    assert redis_client.hget(planning, "r") == f"{T0}:{T0 + 100_000}"


def test_a_short_extension_keeps_the_key_of_a_longer_one_alive(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Two requests under the id: the second's shorter TTL, extended last, does not cut the key's life
    below the first's entry, which would lapse with it (a DELETE then a 404: the step publishes)."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "long", ttl_ms=WINDOW_MS, now_ms=T0)
    delivery.extend_planning("s", "long", ttl_ms=100_000, now_ms=T0 + 5)
    delivery.mark_planning("s", "short", ttl_ms=WINDOW_MS, now_ms=T0 + 10)
    delivery.extend_planning("s", "short", ttl_ms=5_000, now_ms=T0 + 15)
    assert redis_client.pttl(planning) > 90_000
