"""The bound a kept push completion is given up at, read on the resends' own clock: two lease TTLs and
two reaper passes (1 s each) of Redis answering, counted from the later of its keep and the last
outage's end (``resends.py``'s docstring). ``test_push_resend_bound.py`` plays it on real time with
300 ms leases, where the reaper passes outweigh the TTLs; here a 10 s TTL makes each part show.

Before the bound the lease may still be current (a silence's grace renews it by a TTL), so a result
given up then could have landed; after it, it is given up once, and not kept for ever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.reaper import DEFAULT_INTERVAL_S
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.push_resends import (
    CLOCK_TTL_S,
    GIVE_UP_AT_S,
    REFUSED,
    FailingCompletions,
    HandClock,
    keep_refused,
    kept_lost_at,
    kept_on_a_hand_clock,
)


def test_a_kept_completion_refused_while_redis_answers_is_given_up_at_two_ttls_and_two_passes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery, session, clock = kept_on_a_hand_clock(redis_url)
    asyncio.run(keep_refused(delivery, session))
    assert kept_lost_at(clock, session, 1.0) == (1, 0)  # refused: Redis answers, it ages
    graced_s = CLOCK_TTL_S + 2 * DEFAULT_INTERVAL_S + 0.5
    assert kept_lost_at(clock, session, graced_s) == (1, 0)  # graced: may be current
    assert kept_lost_at(clock, session, GIVE_UP_AT_S - 0.5) == (1, 0)
    assert kept_lost_at(clock, session, GIVE_UP_AT_S + 0.5) == (0, 1)  # given up, once
    assert kept_lost_at(clock, session, GIVE_UP_AT_S + 5.0) == (0, 1)


def test_an_outage_restarts_the_bound_from_its_end(redis_client: redis.Redis, redis_url: str) -> None:
    """Unreachable from 1 s to 15 s (no lease held: the resend's own try finds it down), then refused:
    the bound counts from 15 s, not from the keep."""
    delivery, session, clock = kept_on_a_hand_clock(redis_url)
    asyncio.run(keep_refused(delivery, session))
    assert kept_lost_at(clock, session, 0.5) == (1, 0)
    with delivery.lock:
        delivery.error = redis.ConnectionError("connection refused")
    clock.now = 1001.0
    asyncio.run(session.resends.kept(probe=True))
    assert kept_lost_at(clock, session, 14.0) == (1, 0)  # still down: no aging
    with delivery.lock:
        delivery.error = REFUSED
    assert kept_lost_at(clock, session, 15.0) == (1, 0)  # answered again: it ages from here
    assert kept_lost_at(clock, session, 15.0 + GIVE_UP_AT_S - 0.5) == (1, 0)
    assert kept_lost_at(clock, session, 15.0 + GIVE_UP_AT_S + 0.5) == (0, 1)


def test_a_resend_that_lands_after_an_outage_ends_it_for_a_result_kept_later(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Redis back, the first it answers is a kept result landing: from then on results age again, so
    one kept a second later (refused) is given up its bound after its keep, not a bound after some
    later answer (no heartbeat answers here: no lease is heartbeated)."""
    delivery, session, clock = kept_on_a_hand_clock(redis_url, items=2)

    async def outage_then_landing() -> None:
        a, b = await session.claim(2)
        with delivery.lock:
            delivery.error = redis.ConnectionError("connection refused")
        with pytest.raises(redis.ConnectionError):
            await session.complete(a, RESULT)
        clock.now = 1001.0
        await session.resends.kept(probe=True)  # down: no aging
        with delivery.lock:
            delivery.error = None
        clock.now = 1005.0
        await session.resends.kept(probe=True)  # a lands: Redis answers from now
        clock.now = 1006.0
        with delivery.lock:
            delivery.error = REFUSED
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(b, RESULT)

    asyncio.run(outage_then_landing())
    assert (session.stats.accepted, len(session.resends)) == (1, 1)
    assert kept_lost_at(clock, session, 6.0 + GIVE_UP_AT_S - 0.5) == (1, 0)
    assert kept_lost_at(clock, session, 6.0 + GIVE_UP_AT_S + 0.5) == (0, 1)


def test_a_heartbeat_with_no_lease_held_takes_the_resends_own_failure_for_an_outage(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A beat answered for schedule ``t`` while two of its leases were held; one completion then
    refused (kept), the other landed, so nothing is held. Redis then fails the resend: the next
    heartbeat, with no lease to send, probes with the resend itself, and that failure is the outage
    (its beat of ``t`` long past), so the kept result stops ageing and is not given up however long
    the outage lasts. Read with the last beat's answer for ``t``, it aged on and was counted lost
    with Redis never answering since."""
    delivery, session, clock = kept_on_a_hand_clock(redis_url, items=2)

    async def kept_then_nothing_held() -> None:
        a, b = await session.claim(2)
        assert await session.heartbeat() == []  # answered for ``t``
        with delivery.lock:
            delivery.error = REFUSED
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(a, RESULT)
        with delivery.lock:
            delivery.error = None
        await session.complete(b, RESULT)
        with delivery.lock:
            delivery.error = redis.ConnectionError("connection refused")
        clock.now = 1001.0
        assert await session.heartbeat() == []  # no lease: the resend probes, and fails

    asyncio.run(kept_then_nothing_held())
    assert (session.stats.accepted, len(session.resends)) == (1, 1)
    assert kept_lost_at(clock, session, GIVE_UP_AT_S + 5.0) == (1, 0)  # still down: no aging


class _FailingBeats(FailingCompletions):
    """``FailingCompletions`` whose heartbeats raise ``beat_error`` too while it is set."""

    beat_error: Exception | None = None

    def heartbeat_reaching(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            error = self.beat_error
        if error is not None:
            raise error
        return super().heartbeat_reaching(*args, **kwargs)


def test_a_heartbeat_that_fails_stops_the_kept_results_from_ageing(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A beat answered for ``t``; one completion refused (kept), the other lease still held. Then
    Redis answers nothing: the next heartbeat fails, an outage, and the kept result stops ageing
    until Redis answers again, however long that takes; ageing on from the last beat's answer, it was
    given up (counted lost) with no lease of it able to lapse meanwhile (reapers need Redis too)."""
    publish(
        Delivery.from_url(redis_url),
        "t",
        {"w0": [item("a", 0, 10), item("b", 1, 10)]},
        lease_ttl_ms=int(CLOCK_TTL_S * 1000),
    )
    delivery = _FailingBeats(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", retry_for_s=0.0))
    clock = HandClock()
    session.resends.clock = clock

    async def kept_then_an_outage() -> None:
        a, _ = await session.claim(2)
        assert await session.heartbeat() == []  # answered for ``t``
        with delivery.lock:
            delivery.error = REFUSED
        with pytest.raises(redis.ReadOnlyError):
            await session.complete(a, RESULT)
        with delivery.lock:
            delivery.error = delivery.beat_error = redis.ConnectionError("connection refused")
        clock.now = 1001.0
        assert await session.heartbeat() == []  # failed: the outage
        assert session.heartbeats_failing

    asyncio.run(kept_then_an_outage())
    assert kept_lost_at(clock, session, GIVE_UP_AT_S + 5.0) == (1, 0)  # still down: no aging
