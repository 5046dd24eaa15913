"""A sidecar and a cancelled schedule: it stops the engine requests and moves on to the next one.

Against real Redis and a real engine-sim server on loopback, as ``test_runner``.
"""

from __future__ import annotations

import httpx
import redis

from service.delivery.protocol import Delivery
from tests.service.sidecar.procs import item, publish, run_until, tally
from tests.service.sidecar.test_runner import _sidecar, engine_url

__all__ = ["engine_url"]  # the fixture, shared with test_runner


def test_a_cancelled_step_stops_its_engine_requests_and_the_sidecar_takes_the_next_step(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    old = [item("old", i, 6000) for i in range(4)]  # ~0.5 s each, one slot: ~2 s of engine time
    publish(delivery, "old", {"w0": old}, lease_ttl_ms=60_000)
    publish(delivery, "new", {"w0": [item("new", i, 50) for i in range(3)]}, lease_ttl_ms=60_000)

    def cancelled_mid_item() -> bool:
        if delivery.progress("old").running == 1 and delivery.progress("old").cancelled_at_ms is None:
            delivery.cancel("old")
        return delivery.progress("new").finished

    stats = run_until(_sidecar(redis_url, engine_url, slots=1, heartbeat_s=0.05), cancelled_mid_item)

    assert delivery.progress("new").done == 3
    assert stats.claimed == 1 + 3  # of the old step only the item running at the cancel
    assert (stats.lost, stats.stale) == (1, 0)  # the running item stopped, nothing completed late
    assert httpx.get(f"{engine_url}/sim/stats").json()["cancelled"] == 1  # its request was aborted
    assert delivery.read_results("old") == []
    assert tally(delivery, "new", {f"new#{i}" for i in range(3)}) == (0, 0)
