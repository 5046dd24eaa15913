"""A claim the stop left waiting on Redis that then fails is told once, not dropped unlogged.

``push_drain.claim_landed`` awaits the claim the main loop handed the drain (``runner._claim``). Its
``except Exception: pass`` retrieved the claim's error and told it nowhere: the main loop, which logs
a claim's failures, had left that claim to the drain, so a shutdown whose last claim Redis refused or
dropped left no trace of it (what a dropped reply leased lapses, a lease TTL later).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis

from service.delivery.protocol import Delivery
from service.ports import free_port
from service.sidecar.holdings import Holdings
from service.sidecar.push_drain import claim_landed
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


def _landed(session: WorkerSession) -> int:
    """``claim_landed`` on a claim of ``session`` begun before it is called; what the claim held."""

    async def run() -> int:
        claim = asyncio.create_task(session.claim(1))
        await claim_landed(claim, time.monotonic() + 30.0)
        return len(session.holdings)

    return asyncio.run(run())


def test_a_claim_that_failed_while_the_drain_waited_for_it_is_one_warning_naming_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listens on the port: the claim's first call is refused (a real client, no server)."""
    nowhere = Delivery(redis.Redis(port=free_port(), socket_connect_timeout=5))
    session = WorkerSession(nowhere, Holdings(1), SessionSettings("w0"))
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        assert _landed(session) == 0
    lines = [r.getMessage() for r in caplog.records if "claim" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "failed (ConnectionError: Error 111 connecting to" in lines[0]


def test_a_claim_that_landed_while_the_drain_waited_for_it_is_held_and_not_warned_about(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        assert _landed(session) == 1
    assert [r.getMessage() for r in caplog.records] == []
