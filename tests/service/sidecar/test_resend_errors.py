"""A kept completion's resend that Redis refuses with an error other than an outage's (a replica
promoted read-only in a failover: ``READONLY``) stays kept, and never takes the heartbeat down with it.

``resends.py`` ended its round only on a transient error; any other went up through the heartbeat,
which then dropped the leases it had just found lost and counted (the runner never stopped their
engine requests, the pull worker was never told), every beat until the error passed; and at shutdown
it went up through ``settle`` past the drain, its lease counted nowhere.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish


class _ReadOnly(Delivery):
    """A real ``Delivery`` whose completions are refused ``READONLY`` while ``out`` is set."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.out = threading.Event()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        if self.out.is_set():
            raise redis.ReadOnlyError("You can't write against a read only replica.")
        return super().complete_many(*args, **kwargs)


def _refusing(redis_url: str, lease_ttl_ms: int, items: int) -> WorkerSession:
    """A session of ``items`` slots over a schedule of ``items`` items, its completions refused."""
    publish(
        Delivery.from_url(redis_url), "s", {"w0": [item(str(i), 0, 10) for i in range(items)]}, lease_ttl_ms
    )
    delivery = _ReadOnly(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(items), SessionSettings("w0", retry_for_s=0.0))
    delivery.out.set()
    return session


def test_a_heartbeat_whose_resend_is_refused_still_returns_the_leases_it_found_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Before: the heartbeat raised ``ReadOnlyError`` and the lapsed lease ``1#0``, counted lost, was
    returned to nobody."""
    session = _refusing(redis_url, lease_ttl_ms=300, items=2)
    delivery = Delivery.from_url(redis_url)

    async def run() -> list[str]:
        first, _ = await session.claim(2)
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(first, RESULT)
        while delivery.progress("s").running:  # both lapse unheartbeated and are reaped
            delivery.reap("s")
            await asyncio.sleep(0.05)
        return [held.lease.key for held in await session.heartbeat()]

    assert asyncio.run(run()) == ["1#0"]
    assert (session.stats.lost, len(session.resends)) == (1, 1)  # the refused one kept for the next try


def test_a_pull_heartbeat_whose_resend_is_refused_still_returns_the_leases_it_found_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Pull: the refused completion stays held for its worker's retry, tried again next beat. Before:
    the heartbeat raised, and the lost ``1#0`` never reached the worker's list of lost leases."""
    session = _refusing(redis_url, lease_ttl_ms=300, items=2)
    delivery = Delivery.from_url(redis_url)

    async def run() -> list[str]:
        first, _ = await session.claim(2)
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(first, RESULT, keep_unanswered=True)
        while delivery.progress("s").running:
            delivery.reap("s")
            await asyncio.sleep(0.05)
        return [held.lease.key for held in await session.heartbeat()]

    assert asyncio.run(run()) == ["1#0"]
    assert (session.stats.lost, [h.lease.key for h in session.holdings.all()]) == (1, ["0#0"])


def test_a_resend_refused_at_shutdown_counts_lost_and_settle_returns(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Before: ``settle`` raised ``ReadOnlyError`` out of the push drain, the lease counted nowhere."""
    session = _refusing(redis_url, lease_ttl_ms=60_000, items=1)

    async def run() -> None:
        (held,) = await session.claim(1)
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(held, RESULT)
        await session.resends.settle(5.0)

    asyncio.run(run())
    assert (session.stats.lost, len(session.resends)) == (1, 0)
