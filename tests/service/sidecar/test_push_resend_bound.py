"""A push completion kept for a resend is given up (``lost``) once it cannot land any more, and only then.

``resends.py``: a completion Redis never answered is kept and sent again at each heartbeat. One whose
resend Redis keeps refusing (``READONLY``) or whose call alone keeps timing out while Redis answers
the heartbeats was sent for ever, and never counted. Its lease, forgotten, is renewed by no one: once
Redis has answered for ``GIVE_UP_TTLS`` lease TTLs since its keep, that lease lapsed and a reaper
requeued it, so any resend would be refused ``stale``; it now counts ``lost`` then. An outage does not
age it: Redis back, the grace ``common.lua`` gives a running lease after a silence makes it current
again, and the kept result still lands.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.resends import GIVE_UP_TTLS, REAPER_PASSES_S
from service.sidecar.session import WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.push_resends import KEPT_TTL_MS, kept_session


async def _beat_until_given_up(session: WorkerSession, within_s: float) -> float:
    """Heartbeat every 50 ms, the schedule reaped as often (the service's reaper, which reaches every
    schedule each second, well within half of real TTLs), until nothing is kept; the seconds that
    took (the test's bound: never)."""
    reaper, start = Delivery(session.delivery.client), time.monotonic()
    while len(session.resends) and time.monotonic() - start < within_s:
        await session.heartbeat()
        await asyncio.to_thread(reaper.reap, "s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


# the resend's error, and the keys claimed: the first's completion is kept, the second's lease held
FAILING = {
    "refused": (redis.ReadOnlyError("READONLY You can't write against a read only replica."), ["a"]),
    "timing-out": (redis.TimeoutError("Timeout reading from socket"), ["a", "b"]),
}


@pytest.mark.parametrize("case", list(FAILING))
def test_a_kept_completion_redis_answers_past_for_two_ttls_is_given_up_lost_and_could_not_land(
    redis_client: redis.Redis, redis_url: str, case: str
) -> None:
    """Refused by a replica with no other lease held (the resend's own answer says Redis answers),
    or its call alone timing out beside a lease whose heartbeats go through. Before: kept for ever,
    counted nowhere (the loop ran out its 30 s)."""
    error, keys = FAILING[case]
    delivery, session = kept_session(redis_url, keys)

    async def run() -> tuple[int, float]:
        first, *_ = await session.claim(len(keys))
        with delivery.lock:
            delivery.error = error
        with pytest.raises(type(error)):
            await session.complete(first, RESULT)
        return first.lease.token, await _beat_until_given_up(session, 30.0)

    token, took = asyncio.run(run())
    assert len(session.resends) == 0, f"still kept after {took:.1f}s"
    assert ends_of(session.stats) == {"lost": 1}
    assert took >= GIVE_UP_TTLS * KEPT_TTL_MS / 1000 + REAPER_PASSES_S - 0.1  # not before it lapsed
    late = Delivery.from_url(redis_url).complete_many("s", [("a#0", token, RESULT)], None, "w0")
    assert late == [CompletionOutcome.STALE]  # a resend could not have landed: nothing lost


def test_a_kept_completion_through_an_outage_longer_than_its_bound_still_lands(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Redis unreachable (for every client: no reaper reaches the schedule either) a second past the
    bound (no lease held: each resend finds it down), then back: the lease, renewed by no one, is
    graced by the first script after the silence, and the result is accepted. A bound by age alone
    gave it up during the outage (``lost``, the result dropped)."""
    delivery, session = kept_session(redis_url, ["a"])

    async def run() -> None:
        (held,) = await session.claim(1)
        with delivery.lock:
            delivery.error = redis.ConnectionError("connection refused")
        with pytest.raises(redis.ConnectionError):
            await session.complete(held, RESULT)
        start, outage_s = time.monotonic(), GIVE_UP_TTLS * KEPT_TTL_MS / 1000 + REAPER_PASSES_S + 1.0
        while time.monotonic() - start < outage_s:
            await session.heartbeat()
            await asyncio.sleep(0.05)
        with delivery.lock:
            delivery.error = None
        await session.heartbeat()

    asyncio.run(run())
    assert (ends_of(session.stats), len(session.resends)) == ({"accepted": 1}, 0)
    assert [r.key for r in Delivery.from_url(redis_url).read_results("s")] == ["a#0"]
