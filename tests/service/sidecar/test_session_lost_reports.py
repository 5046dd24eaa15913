"""A lease a heartbeat found gone ends there, once: counted ``lost``, and no report of it goes out.

The heartbeat forgets such a lease, then asks Redis whether its schedule was cancelled (``lost`` or
``cancelled``) before the push runner stops the item. An item whose engine reply was waiting
completed in that round trip: its completion was sent for a lease the heartbeat had just declared
lost, refused, and counted ``stale`` as well, so one item ended twice (``stale + lost == 2`` in
``test_process_faults.py``'s paused sidecar, under load). A failure report or a hand-back sent then
counted the item twice the same way (``stale``, or ``lost`` again). The other order, a report first
and a heartbeat while it is answered, leaves the lease to the report.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import SessionSettings, SessionStats, WorkerSession
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT
from tests.service.sidecar.unsent import EACH_REPORT, Report


class _PausedCheck(Delivery):
    """A real ``Delivery`` whose first ``cancelled`` check waits for the test: the heartbeat's round
    trip after it forgot a lease it found gone, before it has counted it."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.asked, self.answer = threading.Event(), threading.Event()

    def cancelled(self, schedule_id: str) -> bool:
        if not self.asked.is_set():
            self.asked.set()
            self.answer.wait(10)
        return super().cancelled(schedule_id)


class _SlowCompletion(Delivery):
    """A real ``Delivery`` whose completions land in Redis at once and answer when the test says."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.landed, self.answer = threading.Event(), threading.Event()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        outcomes = super().complete_many(*args, **kwargs)
        self.landed.set()
        self.answer.wait(10)
        return outcomes


def _lapsed(delivery: Delivery) -> tuple[WorkerSession, Held]:
    """A session holding one started lease that has lapsed and been taken back."""
    delivery.publish(schedule("s", {"w": 1}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    [held] = asyncio.run(session.claim(1))
    session.holdings.start(held)
    delivery.reap("s", now_ms=int(time.time() * 1000) + 60_000)  # a minute on: lapsed, requeued
    return session, held


def _ends(stats: SessionStats) -> dict[str, int]:
    ends = ("accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")
    return {end: getattr(stats, end) for end in ends if getattr(stats, end)}


def test_an_item_completed_while_the_heartbeat_counts_its_lease_lost_is_counted_once(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The push runner's race: the item's engine reply comes while the heartbeat that found its
    lease gone is still asking Redis whether the schedule was cancelled."""
    delivery = _PausedCheck(redis_client)
    session, held = _lapsed(delivery)

    async def main() -> tuple[list[Held], CompletionOutcome]:
        beat = asyncio.create_task(session.heartbeat())
        await asyncio.to_thread(delivery.asked.wait, 10)  # the lease forgotten, not counted yet
        completed = await session.complete(held, RESULT)  # the item's task, its reply in
        delivery.answer.set()
        return await beat, completed

    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        lost, outcome = asyncio.run(main())
    assert lost == [held]
    assert outcome is CompletionOutcome.STALE  # what Redis would answer: the result is dropped
    assert _ends(session.stats) == {"lost": 1}
    assert "refused as stale" not in caplog.text  # not sent: the heartbeat told the loss already


@EACH_REPORT
def test_a_report_of_a_lease_a_heartbeat_found_gone_is_not_sent_and_the_item_ends_once_lost(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, report: Report, answer: object
) -> None:
    delivery = Delivery(redis_client)
    session, held = _lapsed(delivery)
    assert asyncio.run(session.heartbeat()) == [held]
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        assert asyncio.run(report(session, held)) == answer
    assert _ends(session.stats) == {"lost": 1}
    assert caplog.text == ""
    assert delivery.progress("s").queued == 1  # requeued by the reap, for whoever claims it next


def test_a_heartbeat_while_a_refused_completion_is_answered_leaves_the_item_to_the_report(
    redis_client: redis.Redis,
) -> None:
    """The mirror: the completion of a lapsed lease is sent first and refused; a heartbeat before
    its answer came finds the lease gone, and leaves it to the report (counted ``stale`` once)."""
    delivery = _SlowCompletion(redis_client)
    session, held = _lapsed(delivery)

    async def main() -> tuple[list[Held], CompletionOutcome]:
        completing = asyncio.create_task(session.complete(held, RESULT))
        await asyncio.to_thread(delivery.landed.wait, 10)  # refused in Redis; the answer on its way
        lost = await session.heartbeat()
        delivery.answer.set()
        return lost, await completing

    assert asyncio.run(main()) == ([], CompletionOutcome.STALE)
    assert _ends(session.stats) == {"stale": 1}
    assert session.holdings.leases() == []
