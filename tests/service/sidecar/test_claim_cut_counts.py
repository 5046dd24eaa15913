"""A claim cut by the shutdown while it reports an unreadable item failed still ends every lease it
took once in the counters.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended here. A claim counts
its leases ``claimed`` as Redis answers it, then reports each unreadable one failed before it holds
the rest (``claims.py``). The drain cancels a claim still running (``push_drain.claim_landed``, at
its deadline or at once on a second signal: ``hurry.py``); cut during that report, the report's
lease and the readable ones it had not held yet were counted taken and ended nowhere, held by no
one: they lapse and are requeued, as the leases of an unanswered hand-back do (``lost``).
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import redis

from service.delivery.keys import schedule_keys
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule


class _SlowFailureReport(Delivery):
    """Real Redis, but a failure report is answered past the drain's cut."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        time.sleep(1.0)
        return super().fail(lease, reason, now_ms)


def test_a_claim_cut_while_failing_an_unreadable_item_counts_each_lease_it_took_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    Delivery(redis_client).publish(schedule("s", {"w": 3}))
    raw, key = redis.Redis.from_url(redis_url), schedule_keys("s").items  # bytes, not text
    name, value = min(cast(dict[bytes, bytes], raw.hgetall(key)).items())
    raw.hset(key, name, value.replace(b'"prompt_id":"', b'"prompt_id":"\xff'))  # not UTF-8
    raw.close()
    session = WorkerSession(_SlowFailureReport.from_url(redis_url), Holdings(4), SessionSettings("w"))

    async def claim_cut() -> None:
        claim = asyncio.create_task(session.claim(3))
        await asyncio.sleep(0.3)
        claim.cancel()
        await asyncio.gather(claim, return_exceptions=True)

    asyncio.run(claim_cut())
    stats = session.stats
    assert (stats.claimed, stats.failed, stats.lost, len(session.holdings)) == (3, 0, 3, 0)  # before: lost 0
