"""A worker session completing an item while Redis is down (docs/sidecar.md, "Whose fault is a failure").

A short outage is ridden out: the completion is retried until Redis answers and is accepted once. A
longer one than the retry window gives the result up for now: the session must then also forget the
lease, or its heartbeats would keep the item leased forever and it would never run again (the result
is kept and sent once more at the next heartbeats to learn how the lease ended,
``test_push_report_counts.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

RETRYING = "redis unavailable during complete"  # the session's warning on a completion's first failure


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    """A private server with AOF on, so a SIGKILL and restart keep every acknowledged write."""
    with EmbeddedServer(appendonly=True) as server:
        yield server


def _session(server: EmbeddedServer, retry_for_s: float, slots: int = 2) -> WorkerSession:
    """A session whose client does not retry on its own: the session's own retries are under test."""
    delivery = Delivery(redis.Redis.from_url(server.url, decode_responses=True, retry=None))
    return WorkerSession(delivery, Holdings(slots), SessionSettings("w", retry_for_s=retry_for_s))


def _reaped(delivery: Delivery, schedule_id: str, within_s: float) -> bool:
    """Reap until a lapsed lease is requeued (True), or ``within_s`` passes (a guard, not a timing)."""
    give_up = time.monotonic() + within_s
    while not delivery.reap(schedule_id).requeued:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.05)
    return True


def test_a_completion_sent_while_redis_is_down_is_accepted_once_it_returns(
    aof_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "outage", {"w": [item("p", 0, 5)]}, lease_ttl_ms=600_000)
    session = _session(aof_server, retry_for_s=600)
    (held,) = asyncio.run(session.claim(1))
    aof_server.kill()

    async def complete_across_the_outage() -> CompletionOutcome:
        completing = asyncio.create_task(session.complete(held, RESULT))
        while RETRYING not in caplog.text and not completing.done():  # its first try met the outage
            await asyncio.sleep(0.01)
        await asyncio.to_thread(aof_server.start)
        return await completing

    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        assert asyncio.run(complete_across_the_outage()) is CompletionOutcome.ACCEPTED
    assert (session.stats.accepted, session.holdings.leases()) == (1, [])
    assert [(r.key, r.attempt) for r in delivery.read_results("outage")] == [("p#0", 1)]


def test_an_outage_met_by_many_completions_is_one_warning_then_one_line_once_they_go_through(
    aof_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A sidecar completes up to --max-num-seqs items at once, each its own call: a warning per call
    wrote one line per item in flight for one outage, and none said that they had gone through."""
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "outage", {"w": [item("p", i, 5) for i in range(8)]}, lease_ttl_ms=600_000)
    session = _session(aof_server, retry_for_s=600, slots=8)
    helds = asyncio.run(session.claim(8))
    aof_server.kill()

    async def complete_all_across_the_outage() -> list[CompletionOutcome]:
        completing = [asyncio.create_task(session.complete(h, RESULT)) for h in helds]
        while caplog.text.count(RETRYING) < len(helds):  # every call has met the outage
            await asyncio.sleep(0.01)
        await asyncio.to_thread(aof_server.start)
        return await asyncio.gather(*completing)

    with caplog.at_level(logging.DEBUG, logger="service.sidecar"):
        assert asyncio.run(complete_all_across_the_outage()) == [CompletionOutcome.ACCEPTED] * 8
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, message in said if RETRYING in message] == ["WARNING"]
    back = [message for _, message in said if "reachable again" in message]
    assert back == ["redis reachable again: reports go through (complete)"]
    assert len(delivery.read_results("outage")) == 8


def test_a_completion_redis_refuses_past_the_retry_window_is_dropped_with_its_lease(
    aof_server: EmbeddedServer,
) -> None:
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "outage", {"w": [item("p", 0, 5)]}, lease_ttl_ms=1000)
    session = _session(aof_server, retry_for_s=0.2)
    (held,) = asyncio.run(session.claim(1))
    aof_server.kill()
    with pytest.raises(redis.ConnectionError):
        asyncio.run(session.complete(held, RESULT))
    assert session.holdings.leases() == []  # nothing left for the heartbeats to keep alive
    aof_server.start()

    assert _reaped(delivery, "outage", within_s=30)  # its lease lapses a TTL after the claim
    (again,) = asyncio.run(session.claim(1))  # the item runs again
    assert again.lease.attempt == 2
    assert asyncio.run(session.complete(again, RESULT)) is CompletionOutcome.ACCEPTED
    assert [(r.key, r.attempt) for r in delivery.read_results("outage")] == [("p#0", 2)]
