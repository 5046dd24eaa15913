"""A lease dropped because its schedule was cancelled ends there, once: no report of it goes out.

``drop_cancelled`` forgets the leases of a schedule the trainer cancelled and counts them
``cancelled``; the push runner then stops their requests, but an item whose engine reply was already
in may still report it (the drop and the stop are not one step). Redis would refuse that report
(the cancel ended the lease) and the ``Cancels`` set keeps it from counting twice, so the send is a
round trip for nothing, and through an outage a report retried for ``retry_for_s`` before the item
could end: it is answered as refused without asking Redis, as is one of a lease a heartbeat found gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.conftest import schedule
from tests.service.sidecar.unsent import EACH_REPORT, Report


class _Reports(Delivery):
    """A real ``Delivery`` that records which reports were sent to Redis."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.sent: list[str] = []

    def complete_many(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append("complete")
        return super().complete_many(*args, **kwargs)

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append("fail")
        return super().fail(*args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append("release")
        return super().release(*args, **kwargs)


@EACH_REPORT
def test_a_report_of_a_lease_dropped_as_cancelled_is_not_sent_and_the_item_ends_once_cancelled(
    redis_client: redis.Redis, report: Report, answer: object
) -> None:
    delivery = _Reports(redis_client)
    delivery.publish(schedule("s", {"w": 1}))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))
    [held] = asyncio.run(session.claim(1))
    session.holdings.start(held)
    delivery.cancel("s")
    assert asyncio.run(session.found_cancelled("s"))
    assert session.drop_cancelled("s") == [held]

    assert asyncio.run(report(session, held)) == answer
    assert delivery.sent == []
    assert session.stats.cancelled == 1
    assert (session.stats.stale, session.stats.lost, session.stats.released) == (0, 0, 0)
    assert session.holdings.leases() == []
