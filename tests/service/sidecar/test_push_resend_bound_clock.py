"""The bound a kept push completion is given up at, read on the resends' own clock: two lease TTLs and
two reaper passes (1 s each) of Redis answering, counted from the later of its keep and the last
outage's end (``resends.py``'s docstring). ``test_push_resend_bound.py`` plays it on real time with
300 ms leases, where the reaper passes outweigh the TTLs; here a 10 s TTL makes each part show.

Before the bound the lease may still be current (a silence's grace renews it by a TTL), so a result
given up then could have landed; after it, it is given up once, and not kept for ever.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.reaper import DEFAULT_INTERVAL_S
from service.sidecar.session import WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.test_push_resend_bound import RESULT, _Failing, _kept

TTL_S = 10.0
BOUND_S = 2 * TTL_S + 2 * DEFAULT_INTERVAL_S  # two lease TTLs and two reaper passes
REFUSED = redis.ReadOnlyError("READONLY You can't write against a read only replica.")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(redis_url: str) -> tuple[_Failing, WorkerSession, _Clock]:
    """A session with one completion kept (refused by a replica), on a clock the test moves."""
    publish(Delivery.from_url(redis_url), "t", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=int(TTL_S * 1000))
    delivery, session = _kept(redis_url, [])
    clock = _Clock()
    session.resends.clock = clock
    return delivery, session, clock


async def _keep(delivery: _Failing, session: WorkerSession) -> None:
    (held,) = await session.claim(1)
    with delivery.lock:
        delivery.error = REFUSED
    with pytest.raises(redis.ReadOnlyError):  # unanswered: kept for a resend
        await session.complete(held, RESULT)


def _after(clock: _Clock, session: WorkerSession, at_s: float) -> tuple[int, int]:
    """(kept, lost) once the resends' round runs ``at_s`` past the clock's start."""
    clock.now = 1000.0 + at_s
    asyncio.run(session.resends.kept())
    return len(session.resends), session.stats.lost


def test_a_kept_completion_refused_while_redis_answers_is_given_up_at_two_ttls_and_two_passes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery, session, clock = _session(redis_url)
    asyncio.run(_keep(delivery, session))
    assert _after(clock, session, 1.0) == (1, 0)  # refused: Redis answers, it ages
    assert _after(clock, session, TTL_S + 2 * DEFAULT_INTERVAL_S + 0.5) == (1, 0)  # graced: may be current
    assert _after(clock, session, BOUND_S - 0.5) == (1, 0)
    assert _after(clock, session, BOUND_S + 0.5) == (0, 1)  # given up, once
    assert _after(clock, session, BOUND_S + 5.0) == (0, 1)


def test_an_outage_restarts_the_bound_from_its_end(redis_client: redis.Redis, redis_url: str) -> None:
    """Unreachable from 1 s to 15 s (no lease held: the resend's own try finds it down), then refused:
    the bound counts from 15 s, not from the keep."""
    delivery, session, clock = _session(redis_url)
    asyncio.run(_keep(delivery, session))
    assert _after(clock, session, 0.5) == (1, 0)
    with delivery.lock:
        delivery.error = redis.ConnectionError("connection refused")
    clock.now = 1001.0
    asyncio.run(session.resends.kept(probe=True))
    assert _after(clock, session, 14.0) == (1, 0)  # still down: no aging
    with delivery.lock:
        delivery.error = REFUSED
    assert _after(clock, session, 15.0) == (1, 0)  # answered again: it ages from here
    assert _after(clock, session, 15.0 + BOUND_S - 0.5) == (1, 0)
    assert _after(clock, session, 15.0 + BOUND_S + 0.5) == (0, 1)


def test_a_resend_that_lands_after_an_outage_ends_it_for_a_result_kept_later(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Redis back, the first it answers is a kept result landing: from then on results age again, so
    one kept a second later (refused) is given up its bound after its keep, not a bound after some
    later answer (no heartbeat answers here: no lease is heartbeated)."""
    publish(
        Delivery.from_url(redis_url),
        "t",
        {"w0": [item("a", 0, 10), item("b", 1, 10)]},
        lease_ttl_ms=int(TTL_S * 1000),
    )
    delivery, session = _kept(redis_url, [])
    clock = _Clock()
    session.resends.clock = clock

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
    assert _after(clock, session, 6.0 + BOUND_S - 0.5) == (1, 0)
    assert _after(clock, session, 6.0 + BOUND_S + 0.5) == (0, 1)
