"""A failure report or a hand-back of a lease whose schedule's keys are gone (retention passed, or
Redis restarted without its data) still ends the lease once in the counters.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended. A completion of such
a lease counts ``stale`` (``WorkerSession.complete``), and a heartbeat that finds one gone counts it
``lost``; a failure report (``UnknownScheduleError``) and a hand-back (``need no release``) counted
nothing, so ``claimed`` ran ahead of what ended.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
import redis

from service.delivery.errors import UnknownScheduleError
from service.delivery.keys import schedule_keys
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule
from tests.service.sidecar.lease_ends import ends_of


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
    assert (ends_of(session.stats), len(session.holdings)) == ({"stale": 1}, 1)  # before: ({}, 1)


def test_a_hand_back_of_a_gone_schedule_counts_its_leases_lost_as_a_heartbeat_would(
    redis_client: redis.Redis,
) -> None:
    session, held = _held_then_gone(redis_client)
    asyncio.run(session.release(held))
    assert (session.stats.claimed, ends_of(session.stats), len(session.holdings)) == (
        2,
        {"lost": 2},
        0,
    )  # before: {}


class _GoneBeforeTheFailure(Delivery):
    """A real ``Delivery`` whose schedule's keys are deleted just before a failure report reaches
    Redis: the retention passed between the claim and the report."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        self.client.flushdb()
        return super().fail(lease, reason, now_ms)


def test_an_unreadable_items_failure_report_of_a_gone_schedule_counts_stale_and_the_claim_keeps_the_rest(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Claimed beside a readable item, an unreadable one is reported failed at once (``claims.py``).
    Its schedule gone meanwhile, that report raised: the claim returned nothing, and both leases,
    counted ``claimed``, ended nowhere. Now it counts ``stale``, the readable lease is held, and the
    heartbeat that finds it gone counts it ``lost``."""
    Delivery(redis_client).publish(schedule("s", {"w": 2}))
    raw, key = redis.Redis.from_url(redis_url), schedule_keys("s").items  # bytes, not text
    name, value = min(cast(dict[bytes, bytes], raw.hgetall(key)).items())
    raw.hset(key, name, value.replace(b'"prompt_id":"', b'"prompt_id":"\xff'))  # not UTF-8
    raw.close()
    session = WorkerSession(_GoneBeforeTheFailure.from_url(redis_url), Holdings(4), SessionSettings("w"))

    async def run() -> int:
        held = await session.claim(2)
        await session.heartbeat()
        return len(held)

    assert asyncio.run(run()) == 1  # before: 0
    assert (session.stats.claimed, ends_of(session.stats)) == (2, {"stale": 1, "lost": 1})  # before: (2, {})
