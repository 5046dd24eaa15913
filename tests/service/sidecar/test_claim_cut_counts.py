"""A claim cut by the shutdown while it reports an unreadable item failed still ends every lease it
took once in the counters.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended here. A claim counts
its leases ``claimed`` as Redis answers it, then reports each unreadable one failed before it holds
the rest (``claims.py``). The drain cancels a claim still running (``push_drain.claim_landed``, at
its deadline or at once on a second signal: ``hurry.py``); cut during that report, the report's
lease and the readable ones it had not held yet were counted taken and ended nowhere, held by no
one: they lapse and are requeued, as the leases of an unanswered hand-back do (``lost``). The report
cut is kept, as one Redis never answered, for the shutdown's last try (``Resends.settle``): it counts
as Redis answers it (``failed``: it landed, or is taken now), ``lost`` only if it still does not; the
cut counted it ``lost`` at once, where it may have landed (helper sidecar47).
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import pytest
import redis

from service.delivery.keys import schedule_keys
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule


class _SlowFailureReport(Delivery):
    """Real Redis, but a failure report is answered past the drain's cut; once ``out`` is set (the
    shutdown's last try), one is never answered (the connection dropped before the write)."""

    out = False

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        if self.out:
            raise redis.ConnectionError("connection lost before the answer")
        time.sleep(1.0)
        return super().fail(lease, reason, now_ms)


@pytest.mark.parametrize("answered", [True, False], ids=["last try answered", "last try unanswered"])
def test_a_claim_cut_while_failing_an_unreadable_item_counts_each_lease_it_took_once(
    redis_client: redis.Redis, redis_url: str, answered: bool
) -> None:
    """Cut: the two readable leases not held yet are ``lost``, the report is kept. The shutdown's last
    try of it is answered (the cut report landed: DUPLICATE), ``failed``; unanswered, ``lost``."""
    Delivery(redis_client).publish(schedule("s", {"w": 3}))
    raw, key = redis.Redis.from_url(redis_url), schedule_keys("s").items  # bytes, not text
    name, value = min(cast(dict[bytes, bytes], raw.hgetall(key)).items())
    raw.hset(key, name, value.replace(b'"prompt_id":"', b'"prompt_id":"\xff'))  # not UTF-8
    raw.close()
    delivery = _SlowFailureReport.from_url(redis_url)
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))

    async def claim_cut_then_settle() -> list[int]:
        claim = asyncio.create_task(session.claim(3))
        await asyncio.sleep(0.3)
        claim.cancel()
        await asyncio.gather(claim, return_exceptions=True)
        cut = [session.stats.lost, len(session.resends), len(session.holdings)]
        delivery.out = not answered
        await session.resends.settle(30.0)
        return cut

    assert asyncio.run(claim_cut_then_settle()) == [2, 1, 0]  # before: lost 3, nothing kept
    stats = session.stats
    ended = (stats.failed, stats.lost)
    assert (stats.claimed, ended, len(session.resends)) == (3, (1, 2) if answered else (0, 3), 0)
