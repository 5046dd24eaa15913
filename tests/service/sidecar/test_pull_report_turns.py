"""Two reports of one lease in flight at once: the lease still counts once.

A worker's ``/done`` and ``/fail`` of one lease sent together, or a ``/done`` sent again while the first
is still being answered, both found the lease held: the first's answer counted its end, and the
second's refusal (``stale``) or repeat (``duplicate``) counted it again, so ``claimed + stolen +
inherited`` fell short of what ended (docs/sidecar.md, counters). ``test_pull_races.py`` checks who
wins; here the first report lands in Redis and its answer is held back while the second is sent, so
the second always meets the first in flight, and the counts are checked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import httpx
import pytest
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving, until


class _FirstAnswerHeld(Delivery):
    """A real ``Delivery`` whose first report lands in Redis and then waits for ``answer`` before it
    returns: that report stays in flight (its reply on the wire) while the test sends another."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.landed = threading.Event()  # the first report is in Redis, its answer held back
        self.answer = threading.Event()  # let that answer go
        self.again = threading.Event()  # a second report reached Redis
        self._lock = threading.Lock()

    def _held_back(self) -> None:
        with self._lock:
            first = not self.landed.is_set()
            self.landed.set()
        if first:
            self.answer.wait(timeout=60)
        else:
            self.again.set()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        outcomes = super().complete_many(*args, **kwargs)
        self._held_back()
        return outcomes

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        outcome = super().fail(lease, reason, now_ms)
        self._held_back()
        return outcome

    def fail_key(self, *args: Any, **kwargs: Any) -> ReleaseOutcome:
        outcome = super().fail_key(*args, **kwargs)
        self._held_back()
        return outcome


# (first report, second): their answers, and the one counter the lease ends in
RACES = {
    ("done", "done"): ([(200, "accepted"), (200, "duplicate")], {"accepted": 1}),
    ("done", "fail"): ([(200, "accepted"), (200, "stale")], {"accepted": 1}),
    ("fail", "done"): ([(200, "requeued"), (409, "stale")], {"failed": 1}),
    ("fail", "fail"): ([(200, "requeued"), (200, "duplicate")], {"failed": 1}),  # this token's: P:failed
}


@pytest.mark.parametrize(("first", "second"), list(RACES))
def test_a_report_sent_while_another_of_its_lease_is_answered_gets_its_answer_and_the_lease_counts_once(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture, first: str, second: str
) -> None:
    """The second report waits for the first's answer, then is answered as a report of a lease no
    longer held (``duplicate`` or ``stale``, as Redis says) and counted nowhere. Before, it was sent
    at once, found the lease held, and counted beside the first's end: ``{"accepted": 1,
    "duplicate": 1}``, ``{"accepted": 1, "stale": 1}``, ``{"failed": 1, "stale": 1}``."""
    publish(Delivery.from_url(redis_url), "race", {"w0": [item("a", 0, 10)]})
    delivery = _FirstAnswerHeld(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0"))

    def waits() -> bool:  # the second report, waiting for the first's answer
        return any("waits for the report in flight" in r.getMessage() for r in caplog.records)

    async def race(client: httpx.AsyncClient) -> list[tuple[int, str]]:
        lease = (await client.get("/next")).json()
        sent = asyncio.create_task(client.post(f"/{first}", json=report_body(first, lease)))
        await asyncio.to_thread(delivery.landed.wait, 60)
        again = asyncio.create_task(client.post(f"/{second}", json=report_body(second, lease)))
        await until(lambda: delivery.again.is_set() or waits(), "second report in flight")
        delivery.answer.set()
        return [(r.status_code, r.json()["outcome"]) for r in await asyncio.gather(sent, again)]

    async def run() -> list[tuple[int, str]]:
        async with serving(session) as (client, _):
            return await race(client)

    with caplog.at_level(logging.DEBUG, logger="service.sidecar"):
        answers = asyncio.run(run())
    expected_answers, expected_end = RACES[(first, second)]
    assert answers == expected_answers
    assert ends_of(session.stats) == expected_end
    assert session.stats.claimed + session.stats.stolen + session.stats.inherited == 1
    assert len(session.holdings) == 0
