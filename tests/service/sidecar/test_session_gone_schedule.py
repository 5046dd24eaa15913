"""A failure report or a hand-back of a lease whose schedule's keys are gone (retention passed, or
Redis restarted without its data) still ends the lease once in the counters.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended. A completion of such
a lease counts ``stale`` (``WorkerSession.complete``), and a heartbeat that finds one gone counts it
``lost``; a failure report (``UnknownScheduleError``) and a hand-back (``need no release``) counted
nothing, so ``claimed`` ran ahead of what ended.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from service.delivery.errors import UnknownScheduleError
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule

ENDS = ("accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")


def _ended(session: WorkerSession) -> dict[str, int]:
    return {name: getattr(session.stats, name) for name in ENDS if getattr(session.stats, name)}


def _held_then_gone(redis_client: redis.Redis) -> tuple[WorkerSession, list[Held]]:
    """A session holding two leases of schedule ``s``, whose keys are then deleted."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    held = asyncio.run(session.claim(2))
    redis_client.flushdb()
    return session, held


def test_a_failure_report_of_a_gone_schedule_counts_stale_as_its_completion_would(
    redis_client: redis.Redis,
) -> None:
    session, (first, _) = _held_then_gone(redis_client)
    with pytest.raises(UnknownScheduleError):
        asyncio.run(session.fail(first, "engine refused it"))
    assert (_ended(session), len(session.holdings)) == ({"stale": 1}, 1)  # before: ({}, 1)


def test_a_hand_back_of_a_gone_schedule_counts_its_leases_lost_as_a_heartbeat_would(
    redis_client: redis.Redis,
) -> None:
    session, held = _held_then_gone(redis_client)
    asyncio.run(session.release(held))
    assert (session.stats.claimed, _ended(session), len(session.holdings)) == (
        2,
        {"lost": 2},
        0,
    )  # before: {}
