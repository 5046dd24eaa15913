"""A hand-back Redis does not answer still ends each lease once in the counters.

docs/sidecar.md: ``claimed + stolen + inherited`` balances what ended here, each lease counted once as
it ends. A shutdown's hand-back that Redis does not take in time (down, or stalled past the drain) is
abandoned: those leases lapse and the reaper requeues them, as for a sidecar that died. They ended
here, unreported, as a lease a heartbeat finds gone does (``lost``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule
from tests.service.sidecar.procs import item, publish


class CutRelease(Delivery):
    """Real Redis, but a ``release`` of schedule ``cut``'s leases is cut on the connection (Redis
    restarting, or stalled past the shutdown's bound)."""

    cut = ""

    def release(
        self, leases: Sequence[Lease], now_ms: int | None = None, died: str = ""
    ) -> list[ReleaseOutcome]:
        if any(lease.schedule_id == self.cut for lease in leases):
            raise redis.ConnectionError("connection reset by peer")
        return super().release(leases, now_ms, died)


@pytest.mark.parametrize(("cut", "released", "lost"), [("s", 0, 4), ("t", 2, 2)])
def test_leases_a_hand_back_leaves_unanswered_are_counted_lost_so_taken_balances_ended(
    redis_client: redis.Redis, redis_url: str, cut: str, released: int, lost: int
) -> None:
    """Released schedule by schedule, s first: where s's release is cut, t's is not sent either."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    publish(delivery, "t", {"w0": [item("c", 0, 10), item("d", 0, 10)]})
    cutting = CutRelease.from_url(redis_url)
    cutting.cut = cut
    session = WorkerSession(cutting, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def claimed_then_handed_back() -> None:
        held = await session.claim(4)
        assert sorted(h.lease.schedule_id for h in held) == ["s", "s", "t", "t"]
        await session.hand_back(held, 0.5)

    asyncio.run(claimed_then_handed_back())
    stats = session.stats
    assert (stats.claimed, stats.released, stats.lost) == (4, released, lost)
    assert session.holdings.all() == []


def test_a_hand_back_cut_after_an_earlier_schedule_dead_lettered_still_counts_that_failed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """s's item comes back a second time after its sidecar died (refunded once, dead-lettered now,
    its one attempt spent) and t's release is cut: s's lease ended ``failed`` and t's ``lost``."""
    delivery = Delivery.from_url(redis_url)
    delivery.publish(schedule("s", {"w0": 1}, max_attempts=1))
    cutting = CutRelease.from_url(redis_url)
    session = WorkerSession(cutting, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def handed_back_twice() -> int:
        await session.release(await session.claim(1), died="its sidecar")  # refunded, requeued
        publish(delivery, "t", {"w0": [item("c", 0, 10)]})
        held = await session.claim(2)
        assert [h.lease.schedule_id for h in held] == ["s", "t"]
        cutting.cut = "t"
        await session.hand_back(held, 0.5, died="its sidecar")
        return delivery.progress("s").failed

    assert asyncio.run(handed_back_twice()) == 1
    stats = session.stats
    assert (stats.claimed, stats.released, stats.failed, stats.lost) == (3, 1, 1, 1)


def test_two_hand_backs_that_overlap_hand_each_lease_back_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The engine watch hands back what a stalled engine held (``runner._engine_stalled``) while the
    drain or the engine-down path hands back what waits (``push_drain.drain``): each reads the holdings
    as it starts, and a lease in both lists goes back once, counted ``released`` once. A hand-back's
    release runs as a task of its own (``hurry.py``), a turn of the loop after it is called, so both
    read it still held; the second's release was refused and counted the lease ``lost`` beside it."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    session = WorkerSession(delivery, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def stalled() -> None:
        await session.hand_back([h for h in session.holdings.all() if not h.completing], 5.0)

    async def drained() -> None:
        await session.hand_back(session.holdings.waiting(), 5.0)

    async def claimed_then_handed_back_twice() -> None:
        await session.claim(2)
        await asyncio.gather(stalled(), drained())

    asyncio.run(claimed_then_handed_back_twice())
    stats = session.stats
    assert (stats.claimed, stats.released, stats.lost, stats.stale) == (2, 2, 0, 0)
    assert delivery.progress("s").queued == 2
