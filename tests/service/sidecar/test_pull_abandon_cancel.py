"""A beat cancelled (a shutdown) after it dropped an item past its hold bound gives the item's turn up,
so the worker's late report of it is answered, not left waiting for good.

``PullState.abandon`` takes each overdue lease's turn as it drops it (``report_turns.py``), before the
heartbeat and the failure report; a worker's ``/done`` of it waits for that turn. A shutdown may
cancel the beat while the heartbeat waits on Redis, before any failure report went out: the beat's
``finally`` gives every turn it took up, so the report goes on.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving


class _SlowFailure(Delivery):
    """A real ``Delivery`` whose ``gated``-th failure report waits until ``go`` (a Redis that stalls);
    ``reached`` says it is waiting, ``failed`` lists the keys of those answered before it."""

    def __init__(self, client: redis.Redis, gated: int = 1) -> None:
        super().__init__(client)
        self.reached, self.go = threading.Event(), threading.Event()
        self.gated = gated
        self.failed: list[str] = []
        self.reported = ""  # the key of the failure report that waits

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        if len(self.failed) + 1 < self.gated:
            self.failed.append(lease.key)
            return super().fail(lease, reason, now_ms)
        self.reported = lease.key
        self.reached.set()
        self.go.wait(timeout=60)
        return super().fail(lease, reason, now_ms)


def _two_items_held(redis_url: str, gated: int) -> tuple[_SlowFailure, WorkerSession, list[float]]:
    """Items ``a`` and ``b`` for ``w0`` (leases long enough never to lapse here), a session whose
    ``gated``-th failure report stalls, and the clock its holdings read (the test moves it past the
    hold bound)."""
    items = [item("a", 0, 10), item("b", 0, 10)]
    publish(Delivery.from_url(redis_url), "held", {"w0": items}, lease_ttl_ms=600_000)
    delivery = _SlowFailure(redis.Redis.from_url(redis_url), gated)
    clock = [0.0]
    session = WorkerSession(delivery, Holdings(2, clock=lambda: clock[0]), SessionSettings("w0"))
    return delivery, session, clock


def test_a_worker_report_of_an_item_a_cancelled_beat_dropped_and_never_reported_is_answered(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Two items past their bound: the beat is cancelled while the first one's failure report waits
    on Redis, so the second's is never sent; the worker's ``/done`` of the second then lands."""
    delivery, session, clock = _two_items_held(redis_url, gated=1)

    async def run() -> int:
        async with serving(session, hold_timeout_s=100.0) as (client, state):
            leases: list[dict[str, Any]] = [(await client.get("/next")).json() for _ in range(2)]
            clock[0] = 101.0  # past the bound: the beat drops both, then reports them failed
            beat = asyncio.create_task(state.beat())
            await asyncio.to_thread(delivery.reached.wait, 60)
            beat.cancel()  # a shutdown
            delivery.go.set()
            reported = {lease["key"] for lease in leases} - {delivery.reported}
            [lease] = [lease for lease in leases if lease["key"] in reported]
            async with asyncio.timeout(30):  # before: waited for a turn nobody gave up
                answer = await client.post("/done", json=report_body("done", lease))
            return answer.status_code

    assert asyncio.run(run()) == 200  # its lease still current in Redis: the result lands


def test_a_worker_report_of_a_dropped_item_waits_for_its_own_failure_report_not_the_others(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Two items past their bound: the first one's failure report is answered, the second one's waits
    on Redis; the worker's ``/done`` of the first is answered (refused: it failed) meanwhile."""
    delivery, session, clock = _two_items_held(redis_url, gated=2)

    async def run() -> int:
        async with serving(session, hold_timeout_s=100.0) as (client, state):
            leases: list[dict[str, Any]] = [(await client.get("/next")).json() for _ in range(2)]
            clock[0] = 101.0
            beat = asyncio.create_task(state.beat())
            await asyncio.to_thread(delivery.reached.wait, 60)  # the second one's, the first answered
            [lease] = [lease for lease in leases if lease["key"] in delivery.failed]
            try:
                async with asyncio.timeout(30):  # before: waited for the other item's report too
                    answer = await client.post("/done", json=report_body("done", lease))
            finally:
                delivery.go.set()
                await beat
            return answer.status_code

    assert asyncio.run(run()) == 409


def test_a_beat_cancelled_before_it_reported_what_it_dropped_holds_each_again_with_its_failure(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Two items past their bound, the beat cancelled while the first one's failure report waits on
    Redis: that one, and the second, dropped from the holdings and never reported, are held again
    (``failing``, with their failure report), for the shutdown to send it (``PullState._cut``; its
    test: ``test_pull_shutdown_hang_bound.py``). Each counted ``lost`` instead, they were left
    leased by nobody until they lapsed (embedlog55)."""
    delivery, session, clock = _two_items_held(redis_url, gated=1)

    async def run() -> None:
        async with serving(session, hold_timeout_s=100.0) as (client, state):
            assert [(await client.get("/next")).status_code for _ in range(2)] == [200, 200]
            clock[0] = 101.0
            beat = asyncio.create_task(state.beat())
            await asyncio.to_thread(delivery.reached.wait, 60)
            beat.cancel()  # a shutdown
            delivery.go.set()
            await asyncio.gather(beat, return_exceptions=True)

    asyncio.run(run())
    stats = session.stats
    assert (stats.claimed, stats.failed, stats.lost, len(session.holdings)) == (2, 0, 0, 2)
    assert all(held.failing and held.failure for held in session.holdings.all())
