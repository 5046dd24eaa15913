"""A real ``Delivery`` whose reports go unanswered on demand: the connection dropped after the write
(the report landed in Redis) or before it (it never reached Redis). Push and pull tests of how a
report Redis never answered ends its lease share it, the session around it, and the failure report
(push: the session's; pull: the worker's ``/fail``) that goes unanswered so."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.pullclient import report_body


def _lost_answer() -> redis.ConnectionError:
    return redis.ConnectionError("connection lost before the answer")


class UnansweredCompletions(Delivery):
    """Completions go unanswered while ``out`` is set: they land in Redis first when ``lands``, else
    never reach it."""

    def __init__(self, client: redis.Redis, lands: bool) -> None:
        super().__init__(client)
        self.out = threading.Event()
        self.lands = lands

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        if not self.out.is_set():
            return super().complete_many(*args, **kwargs)
        if self.lands:
            super().complete_many(*args, **kwargs)  # landed (a repeat is answered duplicate, not applied)
        raise _lost_answer()


class UnansweredReports(UnansweredCompletions):
    """Failure reports go unanswered too, alike."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        if not self.out.is_set():
            return super().fail(lease, reason, now_ms)
        if self.lands:
            super().fail(lease, reason, now_ms)
        raise _lost_answer()


def unanswered_session(redis_url: str, lands: bool) -> tuple[UnansweredReports, WorkerSession]:
    """Worker ``w0``'s session of one slot whose reports go unanswered on demand, its retry window
    over at the first lost answer. (delivery, session)."""
    delivery = UnansweredReports(redis.Redis.from_url(redis_url), lands)
    return delivery, WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=0.0))


async def pull_fail_unanswered(
    worker: httpx.AsyncClient, delivery: UnansweredCompletions
) -> tuple[dict[str, Any], int]:
    """The worker's next lease (``GET /next``) and the status of its ``/fail`` (reason ``oom``) sent
    while Redis's answers are lost, ``delivery.out`` set for that one call: how the pull tests of a
    failure report Redis never answered begin. (lease, status)."""
    lease: dict[str, Any] = (await worker.get("/next")).json()
    delivery.out.set()
    status = (await worker.post("/fail", json=report_body("fail", lease))).status_code
    delivery.out.clear()
    return lease, status


async def claim_fail_unanswered(
    session: WorkerSession,
    delivery: UnansweredCompletions,
    reason: str = "engine refused it",
    keep_unanswered: bool = False,
) -> Held:
    """The session's one claimed lease, its failure report (``reason``) sent while Redis's answers are
    lost, ``delivery.out`` set for that one call: the report raises the lost answer's
    ``ConnectionError`` (the retry window is over at once). How the tests of a failure report Redis
    never answered, sent by the session itself, begin."""
    (held,) = await session.claim(1)
    delivery.out.set()
    with pytest.raises(redis.ConnectionError):
        await session.fail(held, reason, keep_unanswered=keep_unanswered)
    delivery.out.clear()
    return held


def one_slot_session(redis_url: str, lands: bool) -> tuple[UnansweredReports, list[float], WorkerSession]:
    """Worker ``w0``'s session of one slot whose reports go unanswered on demand, its holdings on a
    clock the test moves by hand (``clock[0]``): how the pull tests of a lease held past its bound
    whose failure report Redis never answered start. (delivery, clock, session)."""
    delivery = UnansweredReports(redis.Redis.from_url(redis_url), lands)
    clock = [0.0]
    holdings = Holdings(1, clock=lambda: clock[0])
    return delivery, clock, WorkerSession(delivery, holdings, SessionSettings("w0", retry_for_s=0.0))
