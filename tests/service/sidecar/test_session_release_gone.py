"""Leases handed back (a pull ``/reset``, a shutdown) after the trainer cancelled their schedule still
end once in the counters: ``cancelled`` (``lost`` for ones that lapsed and were taken back).

Their release answered ``stale`` and was counted nowhere, so ``claimed`` ran ahead of what ended (the
chaos4 soak: a pull worker killed holding two leases of a schedule a DAPO trainer cancelled a moment
before; the new worker's ``/reset`` handed them back uncounted).
"""

from __future__ import annotations

import asyncio

import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule


def _ended(session: WorkerSession) -> int:
    s = session.stats
    return s.accepted + s.duplicate + s.stale + s.failed + s.released + s.lost + s.cancelled


def test_leases_of_a_cancelled_schedule_handed_back_are_counted_cancelled(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    held = asyncio.run(session.claim(2))
    delivery.cancel("s")
    asyncio.run(session.release(held, died="its worker process"))
    assert (session.stats.claimed, session.stats.cancelled, session.stats.released) == (2, 2, 0)
    assert _ended(session) == session.stats.claimed
