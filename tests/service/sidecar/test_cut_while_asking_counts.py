"""A lease found gone still ends once in the counters when a shutdown cuts the question why.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended here. A lease a
heartbeat or a hand-back finds gone is forgotten at once and counted by the answer to one more
question, whether the trainer cancelled its schedule (``cancelled``) or not (``lost``). A shutdown's
bound that cut that question (a slow Redis, a heartbeat cancelled by the stop) left that lease, and
every lease of the schedules after it, counted nowhere, although none of them is ever reported again.
"""

from __future__ import annotations

import asyncio
import time

import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


class SlowCancelCheck(Delivery):
    """Real Redis, but the check whether a schedule was cancelled answers past the caller's bound."""

    def cancelled(self, schedule_id: str) -> bool:
        time.sleep(1.0)
        return super().cancelled(schedule_id)


def _session_holding_s_and_t(redis_url: str) -> tuple[Delivery, WorkerSession]:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=10_000)
    publish(delivery, "t", {"w0": [item("c", 0, 10)]}, lease_ttl_ms=10_000)
    slow = SlowCancelCheck.from_url(redis_url)
    return delivery, WorkerSession(slow, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))


def test_a_hand_back_cut_while_asking_why_a_lease_is_gone_counts_each_lease_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """s's lease is gone (the trainer cancelled s) when its release lands; the bound runs out while
    Redis is asked why, before t's release is sent."""
    delivery, session = _session_holding_s_and_t(redis_url)

    async def claimed_cancelled_handed_back() -> None:
        held = await session.claim(2)
        assert [h.lease.schedule_id for h in held] == ["s", "t"]
        delivery.cancel("s")
        await session.hand_back(held, 0.3)

    asyncio.run(claimed_cancelled_handed_back())
    stats = session.stats
    assert (stats.claimed, stats.released, stats.cancelled, stats.lost) == (2, 0, 0, 2)


def test_a_heartbeat_cancelled_while_asking_why_leases_are_gone_counts_each_lease_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Both schedules cancelled; the heartbeat finds both leases gone and is cancelled (the stop)
    while Redis is asked about s, before t."""
    delivery, session = _session_holding_s_and_t(redis_url)

    async def claimed_cancelled_beaten() -> None:
        assert len(await session.claim(2)) == 2
        delivery.cancel("s")
        delivery.cancel("t")
        beat = asyncio.create_task(session.heartbeat())
        await asyncio.sleep(0.3)
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)

    asyncio.run(claimed_cancelled_beaten())
    stats = session.stats
    assert (stats.claimed, stats.cancelled, stats.lost, len(session.holdings)) == (2, 0, 2, 0)


async def _claimed_cancelled_fail_cut(delivery: Delivery, session: WorkerSession, keep: bool) -> None:
    """s's lease claimed, s cancelled by the trainer, then the lease reported failed (refused: its
    lease is gone) and the report cut (the drain's bound, a second signal) while Redis is asked why."""
    [held, _] = await session.claim(2)
    assert held.lease.schedule_id == "s"
    delivery.cancel("s")
    report = asyncio.create_task(session.fail(held, "engine error", keep_unanswered=keep))
    await asyncio.sleep(0.3)
    report.cancel()
    await asyncio.gather(report, return_exceptions=True)


def test_a_failure_report_cut_while_asking_why_it_was_refused_is_kept_and_its_lease_ends_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Push (the watchdog's report, its lease forgotten as it is sent): the cut report is kept, as one
    Redis never answered (``resends.py``), and its resend at the drain ends the lease once,
    ``cancelled``; t's lease is still held. (Before failure reports were resent: ``lost`` at once.)"""
    delivery, session = _session_holding_s_and_t(redis_url)

    async def cut_then_settled() -> list[int]:
        await _claimed_cancelled_fail_cut(delivery, session, keep=False)
        stats = session.stats
        cut = [stats.stale, stats.cancelled, stats.lost, len(session.resends)]
        await session.resends.settle(10.0)
        return cut

    assert asyncio.run(cut_then_settled()) == [0, 0, 0, 1]
    stats = session.stats
    assert (stats.claimed, stats.stale, stats.cancelled, stats.lost, len(session.holdings)) == (2, 0, 1, 0, 1)


def test_a_pull_failure_report_cut_while_asking_why_it_was_refused_keeps_its_lease_for_the_hand_back(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Pull (a worker's ``/fail`` cut by the drain): the lease stays held, as one whose report Redis
    never answered, so the shutdown's hand-back ends it once (``cancelled``: Redis is given the time
    to say so), not forgotten uncounted."""
    delivery, session = _session_holding_s_and_t(redis_url)

    async def cut_then_handed_back() -> None:
        await _claimed_cancelled_fail_cut(delivery, session, keep=True)
        assert [h.lease.schedule_id for h in session.holdings.all()] == ["s", "t"]
        assert not any(h.completing for h in session.holdings.all())
        await session.hand_back(session.holdings.all(), 10.0)

    asyncio.run(cut_then_handed_back())
    stats = session.stats
    assert (stats.claimed, stats.released, stats.cancelled, stats.lost, stats.stale) == (2, 1, 1, 0, 0)
