"""The pull worker's reports Redis never answered, staged for the tests of how they are sent again:
a store whose failures and completions go unanswered on demand, a one-item schedule, the session on a
clock the test moves, the pull app served with a hold bound, a ``/fail`` held past that bound, and a
lease left to lapse. The fail-resends, both-unanswered, resend-edges and fail-lapsed tests share them,
so a change to how a resend is staged reaches them all, rather than through one test module's private
names."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease, LeaseSettings, PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import StateScript, serve
from tests.service.sidecar.unanswered import UnansweredReports, pull_fail_unanswered, unanswered_session

HOLD_BOUND_S = 100.0  # the pull app's hold bound; the session's clock is moved past it by hand


class UnansweredFailures(UnansweredReports):
    """``UnansweredReports`` whose failure reports alone also go unanswered while ``fails_out`` is set."""

    def __init__(self, client: redis.Redis, lands: bool) -> None:
        super().__init__(client, lands)
        self.fails_out = threading.Event()

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        if self.fails_out.is_set():
            self.out.set()
            try:
                return super().fail(lease, reason, now_ms)
            finally:
                self.out.clear()
        return super().fail(lease, reason, now_ms)


class UnansweredResults(UnansweredFailures):
    """``UnansweredFailures`` whose completions alone also go unanswered while ``results_out`` is set."""

    def __init__(self, client: redis.Redis, lands: bool) -> None:
        super().__init__(client, lands)
        self.results_out = threading.Event()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        if self.results_out.is_set():
            self.out.set()
            try:
                return super().complete_many(*args, **kwargs)
            finally:
                self.out.clear()
        return super().complete_many(*args, **kwargs)


def one_item_published(redis_url: str, max_attempts: int = 5) -> Delivery:
    """Schedule ``s``: one item ``a#0`` for ``w0``, leases of ten minutes, ``max_attempts``."""
    delivery = Delivery.from_url(redis_url)
    lease = LeaseSettings(lease_ttl_ms=600_000, max_attempts=max_attempts)
    delivery.publish(PublishedSchedule(schedule_id="s", queues={"w0": (item("a", 0, 10),)}, lease=lease))
    return delivery


def results_unanswered_session(
    redis_url: str, lands: bool
) -> tuple[UnansweredResults, list[float], WorkerSession]:
    """Worker ``w0``'s session of one slot, its reports unanswered on demand, its holdings' clock the
    test's (``clock[0]``)."""
    delivery = UnansweredResults(redis.Redis.from_url(redis_url), lands)
    clock = [0.0]
    holdings = Holdings(1, clock=lambda: clock[0])
    return delivery, clock, WorkerSession(delivery, holdings, SessionSettings("w0", retry_for_s=0.0))


def serve_bounded(session: WorkerSession, script: StateScript) -> Any:
    """Run ``script(client, state)`` against a pull app around ``session``, its hold bound
    ``HOLD_BOUND_S``."""
    return serve(session, script, hold_timeout_s=HOLD_BOUND_S)


def unanswered_fail_held_past_the_bound(redis_url: str) -> tuple[Delivery, WorkerSession]:
    """Item ``a#0`` (one attempt) pulled, its ``/fail`` (reason ``oom``) never reaching Redis (503),
    nothing more reported; a beat past the hold bound sends it again and ends the lease. The store
    and the session, for what each test reads of them."""
    store = one_item_published(redis_url, max_attempts=1)
    delivery, clock, session = results_unanswered_session(redis_url, lands=False)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(client, delivery)
        clock[0] = HOLD_BOUND_S + 1
        await state.beat()
        return [unanswered, len(session.holdings)]

    assert serve_bounded(session, script) == [503, 0]
    return store, session


LAPSING_TTL_MS = 300  # ``lapsing_pull``'s lease lapses quickly once nobody heartbeats it


def lapsing_pull(redis_url: str) -> tuple[UnansweredReports, WorkerSession]:
    """Worker ``w0``'s one-slot session whose reports go unanswered (never landing) on demand."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=LAPSING_TTL_MS)
    return unanswered_session(redis_url, lands=False)


async def lapse(delivery: Delivery) -> None:
    """Wait until the unheartbeated lease has lapsed and been reaped."""
    while delivery.progress("s").running:
        delivery.reap("s")
        await asyncio.sleep(0.05)
