"""A pull worker's ``/fail`` and a heartbeat that cross: the lease ends once, counted ``failed``.

The pull API reports a failure with the lease kept held until Redis answers (a 503 keeps it for the
retry). A heartbeat that ran after Redis took the failure, and before its answer came back, found the
lease gone and counted it ``lost`` too (listed under ``/leases`` ``lost`` as well): one lease, two
ends, so the sidecar's counters ran ahead of what it claimed (the chaos4 soak). A completion was
already marked ``completing`` for the heartbeat to leave alone; a failure now is too.
"""

from __future__ import annotations

import asyncio
import threading

import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule


class _SlowAnswer(Delivery):
    """A real ``Delivery`` whose ``fail`` lands in Redis at once and answers when the test says."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.landed, self.answer = threading.Event(), threading.Event()

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        outcome = super().fail(lease, reason, now_ms)
        self.landed.set()
        self.answer.wait(10)
        return outcome


def test_a_heartbeat_while_a_failure_report_is_answered_leaves_its_lease_to_the_report(
    redis_client: redis.Redis,
) -> None:
    delivery = _SlowAnswer(redis_client)
    delivery.publish(schedule("s", {"w": 1}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))

    async def main() -> tuple[ReleaseOutcome, list[str]]:
        [held] = await session.claim(1)
        session.holdings.start(held)
        failing = asyncio.create_task(session.fail(held, "the worker could not run it", keep_unanswered=True))
        await asyncio.to_thread(delivery.landed.wait, 10)  # Redis took it; its answer is on the way
        lost = await session.heartbeat()
        delivery.answer.set()
        return await failing, [h.lease.key for h in lost]

    outcome, lost = asyncio.run(main())
    assert outcome is ReleaseOutcome.REQUEUED
    assert lost == []  # not listed lost: the report decides
    assert (session.stats.failed, session.stats.lost) == (1, 0)  # one lease, one end
