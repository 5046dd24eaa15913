"""A hand-back ends by its own bound (``HandBacks.hand_back``'s ``within_s``) when Redis stalls: the
shutdown keeps to the pod's grace period, and what Redis did not take by then is left to lapse,
each lease counted ``lost`` once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish

WITHIN_S = 2.0


class StalledRelease(Delivery):
    """Real Redis, but a ``release`` waits until the test lets it go (Redis stalled mid-shutdown)."""

    gate = threading.Event()

    def release(
        self, leases: Sequence[Lease], now_ms: int | None = None, died: str = ""
    ) -> list[ReleaseOutcome]:
        self.gate.wait(60)
        return super().release(leases, now_ms, died)


def test_a_hand_back_redis_stalls_on_ends_by_its_bound_and_counts_its_leases_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Bound ``WITHIN_S``: it returns before twice that (a loaded host's slack is the other half),
    and its four leases of two schedules ended once each, ``lost``, and are no longer held: s's,
    whose release the bound cut, and t's, never sent."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    publish(Delivery.from_url(redis_url), "t", {"w0": [item("c", 0, 10), item("d", 0, 10)]})
    stalled = StalledRelease.from_url(redis_url)
    stalled.gate = threading.Event()
    session = WorkerSession(stalled, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def claimed_then_handed_back() -> float:
        held = await session.claim(4)
        started = time.monotonic()
        try:
            await session.hand_back(held, WITHIN_S)
            return time.monotonic() - started
        finally:
            stalled.gate.set()  # the release thread goes on, so the loop's executor can shut down

    took_s = asyncio.run(claimed_then_handed_back())
    assert WITHIN_S - 0.05 <= took_s < 2 * WITHIN_S - 0.1, took_s
    assert (session.stats.claimed, session.stats.released, session.stats.lost) == (4, 0, 4)
    assert session.holdings.all() == []
