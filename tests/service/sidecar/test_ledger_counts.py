"""A report of a lease this sidecar never held counts nothing here but what lands (``ledger.py``).

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended here. A pull worker
may report a lease this process never held (a killed predecessor's, handed back and counted ``reset``
by it; or a key it made up): refused, it is that worker's word alone, which could name keys without
end, so it counts in no end counter, not even ``cancelled`` when the trainer cancelled its schedule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, SessionStats, WorkerSession
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

ENDS = ("inherited", "accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")


def _ended(stats: SessionStats) -> dict[str, int]:
    """The end counters, and ``inherited``, that are not zero."""
    return {name: getattr(stats, name) for name in ENDS if getattr(stats, name)}


def test_reports_of_a_cancelled_schedules_lease_never_held_here_count_nothing(
    redis_client: redis.Redis,
) -> None:
    """The predecessor held the lease; the trainer cancelled its schedule; the worker's reports of it
    reach this process, which never held it: refused, and counted nowhere (it was not this one's)."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 1}))
    predecessor = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    [held] = asyncio.run(predecessor.claim(1))
    delivery.cancel("s")
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    lease = held.lease

    async def run() -> tuple[CompletionOutcome, ReleaseOutcome]:
        done = await session.complete_key(lease.schedule_id, lease.key, lease.token, RESULT, held=False)
        failed = await session.fail_key(lease.schedule_id, lease.key, lease.token, "oom")
        return done, failed

    assert asyncio.run(run()) == (CompletionOutcome.STALE, ReleaseOutcome.STALE)
    assert session.is_cancelled("s")
    assert _ended(session.stats) == {}


def test_a_failure_report_that_dead_letters_the_item_counts_failed(redis_client: redis.Redis) -> None:
    """Its last attempt spent, the item is dead-lettered, not requeued: the report was taken all the
    same, and the lease ends ``failed``, not refused as ``stale``."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 1}, max_attempts=1))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    [held] = asyncio.run(session.claim(1))

    assert asyncio.run(session.fail(held, "the engine refused it")) is ReleaseOutcome.DEAD_LETTERED
    assert _ended(session.stats) == {"failed": 1}


def test_a_pull_failure_report_redis_never_answered_keeps_its_lease_and_counts_nothing_yet(
    redis_client: redis.Redis,
) -> None:
    """The worker is told to retry (a 503), so the lease stays held and ends by that retry's answer;
    counted ``lost`` now, it would count twice once the retry lands."""

    class _Down(Delivery):
        def fail(self, *args: Any, **kwargs: Any) -> Any:
            raise redis.ConnectionError("connection refused")

    delivery = _Down(redis_client)
    delivery.publish(schedule("s", {"w": 1}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w", retry_for_s=0.0))
    [held] = asyncio.run(session.claim(1))

    with pytest.raises(redis.ConnectionError):
        asyncio.run(session.fail(held, "oom", keep_unanswered=True))
    assert (_ended(session.stats), len(session.holdings)) == ({}, 1)
