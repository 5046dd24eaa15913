"""An unreadable item's failure report at its claim that Redis never answered is kept and sent again
at the next heartbeat, so its lease ends once, as what Redis recorded.

``claims.py`` fails an item whose stored text UTF-8 cannot carry at its claim (it is never held).
One try: unanswered, it counted ``lost`` at once, where the report may have landed (the item failed,
an attempt spent: ``failed``) or not (its lease lapses: ``stale``, or the resend takes it now:
``failed``). ``release.lua`` answers the repeat of a taken failure DUPLICATE (round 45, failonce), so
the report is now kept (``resends.py``, as a push failure report) and its resend's answer counts it.
Push and pull both heartbeat through ``WorkerSession.heartbeat``, which sends what is kept; at the
shutdown, one still unanswered counts ``lost`` (``Resends.settle``), as a kept push report does.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import redis

from service.delivery.hangable import hangable
from service.delivery.keys import schedule_keys
from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serving
from tests.service.sidecar.unanswered import UnansweredReports


def _damaged(redis_url: str) -> None:
    """Schedule ``s``: a#0 then b#0 for w0, ten-minute leases, a#0's ``prompt_id`` not UTF-8."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 20)]}, 600_000)
    raw, key = redis.Redis.from_url(redis_url), schedule_keys("s").items
    ((name, value),) = [(n, v) for n, v in cast(dict[bytes, bytes], raw.hgetall(key)).items() if b'"a"' in v]
    raw.hset(key, name, value.replace(b'"prompt_id":"a"', b'"prompt_id":"a\xff"'))
    raw.close()


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "never landed"])
def test_an_unanswered_failure_report_of_an_unreadable_item_counts_failed_once_at_the_next_heartbeat(
    redis_client: redis.Redis, redis_url: str, lands: bool
) -> None:
    """Before: ``lost`` at once, nothing sent again (never landed, its lease lapsed a TTL later and
    its next claim failed it again, a second attempt spent)."""
    _damaged(redis_url)
    delivery = UnansweredReports(hangable(redis_url, **REPLY_DECODING), lands)
    session = WorkerSession(delivery, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> list[Any]:
        delivery.out.set()
        held = [h.lease.key for h in await session.claim(2)]
        delivery.out.clear()
        at_claim = [dict(ends_of(session.stats)), len(session.resends)]
        lost = await session.heartbeat()
        return [held, at_claim, lost, len(session.resends)]

    assert asyncio.run(run()) == [["b#0"], [{}, 1], [], 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (2, {"failed": 1})
    (lease,) = Delivery.from_url(redis_url).claim("s", "w0", 1)  # a#0, requeued by the one failure
    assert (lease.key, lease.attempt) == ("a#0", 2)


def test_a_pull_sidecar_stopped_with_an_unreadable_items_report_unanswered_counts_it_lost_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Redis never answers it again before the stop: the shutdown's last try, unanswered, counts it
    ``lost``, so ``claimed`` balances what ended (b#0, held, handed back: ``released``)."""
    _damaged(redis_url)
    delivery = UnansweredReports(hangable(redis_url, **REPLY_DECODING), lands=False)
    session = WorkerSession(delivery, Holdings(8, None), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> int:
        async with serving(session, lifespan=True, release_within_s=1.0) as (worker, _):
            delivery.out.set()
            return (await worker.get("/next", params={"wait_s": 20})).status_code

    assert asyncio.run(run()) == 200
    assert (session.stats.claimed, ends_of(session.stats)) == (2, {"released": 1, "lost": 1})
