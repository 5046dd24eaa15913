"""The heartbeat's resend of a pull ``/done`` Redis never answered waits for a worker's retry in flight.

A ``/done`` that landed unanswered keeps its lease held with its result (``Held.unanswered``); the
heartbeat that finds the lease gone sends that result once more to learn how it ended
(``resends.again``). The worker's retry may be on the wire at that moment: the resend takes the
lease's turn (``report_turns.py``), so it waits for the retry's answer, then finds the lease no longer
held and sends nothing. Sent beside the retry, both were answered ``duplicate`` and the lease
counted twice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serving

WAITS = "waits for the report in flight"  # report_turns.py's DEBUG line


class _Wire(Delivery):
    """A real ``Delivery``: while ``out`` is set a completion lands and goes unanswered; the first one
    after ``hold`` is set lands and its answer waits for ``answer`` (``landed`` says it is there);
    a cancel check waits for ``go`` (``asked`` says it is there)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.out, self.hold, self.landed, self.answer = (threading.Event() for _ in range(4))
        self.asked, self.go = threading.Event(), threading.Event()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        outcomes = super().complete_many(*args, **kwargs)
        if self.out.is_set():
            raise redis.ConnectionError("connection lost before the answer")
        if self.hold.is_set() and not self.landed.is_set():
            self.landed.set()
            self.answer.wait(timeout=60)
        return outcomes

    def cancelled(self, schedule_id: str) -> bool:
        self.asked.set()
        self.go.wait(timeout=60)
        return super().cancelled(schedule_id)


def test_the_heartbeats_resend_waits_for_the_workers_retry_on_the_wire_and_the_lease_counts_once(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(
        Delivery.from_url(redis_url), "two", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=300
    )
    delivery = _Wire(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> list[Any]:
        async with serving(session) as (client, state):
            lapses, done = [(await client.get("/next")).json() for _ in range(2)]
            body = {key: done[key] for key in ("schedule_id", "key", "token")} | {"output_tokens": 10}
            delivery.out.set()
            first = (await client.post("/done", json=body)).status_code  # landed, unanswered: 503
            delivery.out.clear()
            while delivery.progress("two").running:  # the other lease lapses unheartbeated and is reaped
                delivery.reap("two")
                await asyncio.sleep(0.05)
            beat = asyncio.create_task(state.beat())
            await asyncio.to_thread(delivery.asked.wait, 60)  # the heartbeat counts the lapsed one
            delivery.hold.set()
            retry = asyncio.create_task(client.post("/done", json=body))
            await asyncio.to_thread(delivery.landed.wait, 60)  # the retry on the wire, unanswered yet
            delivery.go.set()  # the heartbeat goes on to its resend
            deadline = time.monotonic() + 60
            while not (beat.done() or WAITS in caplog.text):
                assert time.monotonic() < deadline, "the resend neither waited nor ended"
                await asyncio.sleep(0.01)
            delivery.answer.set()
            retried = await retry
            await beat
            return [first, lapses["key"], (retried.status_code, retried.json()["outcome"])]

    with caplog.at_level(logging.DEBUG, logger="service.sidecar"):
        assert asyncio.run(run()) == [503, "a#0", (200, "duplicate")]
    counted = {"lost": session.stats.lost, "duplicate": session.stats.duplicate}
    assert counted == {"lost": 1, "duplicate": 1}  # before: duplicate 2
