"""A hand-back ends by its own bound (``HandBacks.hand_back``'s ``within_s``) when Redis stalls: the
shutdown keeps to the pod's grace period, and what Redis did not take by then is left to lapse,
each lease counted ``lost`` once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.hurry import Hurry
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish

WITHIN_S = 2.0
T = TypeVar("T")


class StalledRelease(Delivery):
    """Real Redis, but a ``release`` waits until the test lets it go (Redis stalled mid-shutdown);
    ``returned`` is set once a release has come back."""

    gate = threading.Event()
    returned = threading.Event()

    def release(
        self, leases: Sequence[Lease], now_ms: int | None = None, died: str = ""
    ) -> list[ReleaseOutcome]:
        self.gate.wait(60)
        try:
            return super().release(leases, now_ms, died)
        finally:
            self.returned.set()


class BoundSeen(Hurry):
    """A hurry never set (the hand-back's own bound alone, as without one), noting how far off the
    end it is given lies when it begins waiting: the bound, not a time a loaded host could stretch."""

    given_s: float | None = None

    async def bound(self, work: Coroutine[Any, Any, T], planned: float) -> T:
        self.given_s = planned - time.monotonic()
        return await super().bound(work, planned)


def test_a_hand_back_redis_stalls_on_ends_by_its_bound_and_counts_its_leases_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Bound ``WITHIN_S``: the wait is given no more than that, it returns no earlier, and while the
    release it bounds is still stalled (the order of events, not a wall-time ceiling a loaded host
    could break: without the bound it returned only once the gate opened, 60 s on), and its four
    leases of two schedules ended once each, ``lost``, and are no longer held: s's, whose release the
    bound cut, and t's, never sent."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    publish(Delivery.from_url(redis_url), "t", {"w0": [item("c", 0, 10), item("d", 0, 10)]})
    stalled = StalledRelease.from_url(redis_url)
    stalled.gate, stalled.returned = threading.Event(), threading.Event()
    session = WorkerSession(stalled, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    seen = BoundSeen(grace_s=WITHIN_S)

    async def claimed_then_handed_back() -> tuple[float, bool]:
        held = await session.claim(4)
        started = time.monotonic()
        try:
            await session.hand_back(held, WITHIN_S, hurry=seen)
            return time.monotonic() - started, stalled.returned.is_set()
        finally:
            stalled.gate.set()  # the release thread goes on, so the loop's executor can shut down

    took_s, release_returned = asyncio.run(claimed_then_handed_back())
    assert seen.given_s is not None
    assert seen.given_s <= WITHIN_S, seen.given_s  # a load only shortens what is left when it begins
    assert took_s >= WITHIN_S - 0.05, took_s
    assert not release_returned  # the bound ended it, not the release
    assert (session.stats.claimed, session.stats.released, session.stats.lost) == (4, 0, 4)
    assert session.holdings.all() == []
