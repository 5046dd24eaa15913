"""A failure report Redis never answered, sent again (``resends.py``): in push mode once a heartbeat,
whatever the session's retry window (the heartbeat that sends it waits for no outage to end: sent
through the window, ``retry_for_s``, 60 s by default, as the first report was, a resend on a Redis
still down held that heartbeat, and every lease it was to renew, for the whole window), and logged
as the failure report it is. In pull mode the heartbeat's resend sends nothing once the worker's own
retry of ``/fail`` came first and was answered: sent again, its answer (DUPLICATE: the retry's
failure) counted the one failure twice."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings, lease_id
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.unanswered import UnansweredReports, claim_fail_unanswered

RETRY_FOR_S = 30.0  # the session's window for a first report: far past the heartbeat's bound below
BEAT_BOUND_S = 10.0  # a heartbeat that sends one report once ends well within it, on a loaded host


class _Counted(UnansweredReports):
    """Failure reports go unanswered (never reaching Redis) while ``out`` is set, each try counted."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, lands=False)
        self.tries = 0

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        self.tries += 1
        return super().fail(*args, **kwargs)


def test_a_kept_failure_report_is_tried_once_a_heartbeat_while_redis_stays_down(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery = _Counted(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=RETRY_FOR_S))

    async def run() -> tuple[int, int]:
        (held,) = await session.claim(1)
        delivery.out.set()
        with pytest.raises(TimeoutError):  # the shutdown's bound cuts the first report: kept
            await asyncio.wait_for(session.fail(held, "engine refused it"), 0.5)
        before = delivery.tries
        await asyncio.wait_for(session.heartbeat(), BEAT_BOUND_S)
        return delivery.tries - before, len(session.resends)

    assert asyncio.run(run()) == (1, 1)  # one try, and still kept for the next heartbeat


def test_a_push_failure_report_sent_again_is_logged_as_a_failure_report(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery = _Counted(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> None:
        await claim_fail_unanswered(session, delivery)
        await session.heartbeat()

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        asyncio.run(run())
    sent = [r.getMessage() for r in caplog.records if "sent again once Redis answered" in r.getMessage()]
    assert sent == ["failure report of a#0 sent again once Redis answered: requeued"]


def test_a_pull_fail_resent_by_a_heartbeat_after_the_workers_retry_was_answered_sends_nothing(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery = _Counted(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> tuple[Any, int, int]:
        # pull: kept held for the worker's retry
        held = await claim_fail_unanswered(session, delivery, "oom", keep_unanswered=True)
        await session.fail(held, "oom", keep_unanswered=True)  # the retry, answered first
        tries = delivery.tries
        assert session.holdings.get(lease_id(held.lease)) is None
        outcome = await session.resends.fail_again(held, session.holdings)  # the beat's, after it
        return outcome, delivery.tries - tries, session.stats.failed

    assert asyncio.run(run()) == (None, 0, 1)
