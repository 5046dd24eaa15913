"""A sidecar's shutdown says what it hands back: one INFO line, how many leases and of which schedules,
before they go back to their queues, so that a user reading the log after a stop sees where their items
went.

A SIGTERM while a claim's reply was in flight left that claim to the drain, which handed its leases back
unstarted and wrote nothing: the log ended at "engine ready", the items back in Redis unsaid (round 59's
second-SIGTERM test, docs/experiments.md). A pull sidecar's shutdown handed back what its worker held
as silently.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.hurry import Hurry
from service.sidecar.in_flight import InFlight
from service.sidecar.pull_api import create_pull_app
from service.sidecar.push_drain import drain
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import asgi_client

GRACE_S = 2.0


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: handing back")]


def test_a_drain_says_it_hands_back_what_a_claim_in_flight_at_the_stop_leased(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(Delivery.from_url(redis_url), "twice", {"w0": [item("a", 0, 10), item("a", 1, 10)]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))

    async def stopped() -> None:
        claim = asyncio.create_task(session.claim(2))  # its reply still on its way as the drain begins
        await drain(session, InFlight(), claim, Hurry(GRACE_S), time.monotonic() + 30.0, GRACE_S)

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        asyncio.run(stopped())
    assert _said(caplog) == ["stopping: handing back 2 unstarted leases to their queues (schedule twice)"]
    progress = Delivery.from_url(redis_url).progress("twice")
    assert (progress.queued, progress.running) == (2, 0)
    assert session.stats.released == 2


def test_a_drain_with_nothing_held_says_nothing_of_a_hand_back(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))

    async def stopped() -> None:
        await drain(session, InFlight(), None, Hurry(GRACE_S), time.monotonic() + 30.0, GRACE_S)

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        asyncio.run(stopped())
    assert _said(caplog) == []


def test_a_pull_sidecars_shutdown_says_it_hands_back_what_its_worker_held(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(Delivery.from_url(redis_url), "pulled", {"w0": [item("a", 0, 10)]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    stopping = asyncio.Event()

    async def run() -> None:
        app = create_pull_app(session, stopping=stopping.is_set, release_within_s=GRACE_S, drain_s=0.0)
        async with app.router.lifespan_context(app):  # shutdown (the hand-back) runs as the block ends
            async with asgi_client(app) as client:
                while (await client.get("/ready")).status_code != 200:  # connected, takeover done
                    await asyncio.sleep(0.01)
                assert (await client.get("/next")).status_code == 200
            stopping.set()  # a SIGTERM: the worker holds the item it was handed

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        asyncio.run(run())
    assert _said(caplog) == ["stopping: handing back 1 held lease to their queues (schedule pulled)"]
    assert Delivery.from_url(redis_url).progress("pulled").queued == 1


def test_a_drain_says_it_hands_back_the_started_leases_of_every_schedule_that_did_not_finish(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Started, they go back at the deadline as unfinished, in one line naming each schedule once."""
    for schedule_id in ("second", "first"):
        publish(
            Delivery.from_url(redis_url), schedule_id, {"w0": [item(schedule_id, 0, 10), item("b", 1, 10)]}
        )
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def stopped() -> None:
        while len(session.holdings) < 4:
            await session.claim(4)
        for held in session.holdings.all():
            session.holdings.start(held)  # sent to the engine: none is waiting at the stop
        await drain(session, InFlight(), None, Hurry(GRACE_S), time.monotonic() + 30.0, GRACE_S)

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        asyncio.run(stopped())
    assert _said(caplog) == [
        "stopping: handing back 4 unfinished leases to their queues (schedule first, second)"
    ]
    assert session.stats.released == 4
