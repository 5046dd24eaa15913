"""The heartbeat's resend of push completions Redis never answered (``resends.py``): one try a beat
while Redis stays down, not one per kept result.

Each try of a Redis that does not answer costs a socket timeout, so the round ends at the first
unanswered one (kept again for the next heartbeat); the rest wait for that beat. Redis answering
again, the next beat sends them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish


class _Down(Delivery):
    """A real ``Delivery`` whose completions go unanswered (never reaching Redis) while ``out`` is
    set; ``sent`` counts the completions tried."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.out = threading.Event()
        self.sent = 0

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        self.sent += 1
        if self.out.is_set():
            raise redis.ConnectionError("connection refused")
        return super().complete_many(*args, **kwargs)


def test_a_heartbeat_while_redis_is_down_tries_one_kept_completion_and_the_next_sends_them_all(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10), item("c", 0, 10)]})
    delivery = _Down(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(3), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> list[int]:
        helds = await session.claim(3)
        delivery.out.set()
        for held in helds:
            with contextlib.suppress(redis.ConnectionError):
                await session.complete(held, RESULT)
        kept, tried = len(session.resends), delivery.sent
        await session.heartbeat()  # Redis still down
        during = delivery.sent - tried
        delivery.out.clear()
        await session.heartbeat()
        return [kept, during, len(session.resends), session.stats.accepted]

    assert asyncio.run(run()) == [3, 1, 0, 3]


class _Stalled(Delivery):
    """A real ``Delivery`` whose completions, once ``stall`` is set, get no answer until ``go`` (a
    Redis that stopped answering), and whose first completion lands with its answer cut (``cut``)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.stall, self.go, self.cut = threading.Event(), threading.Event(), threading.Event()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        if self.stall.is_set():
            self.go.wait(timeout=60)
            raise redis.TimeoutError("no answer")
        outcomes = super().complete_many(*args, **kwargs)
        self.cut.set()
        self.go.wait(timeout=60)  # the answer never comes before the task is cancelled
        return outcomes


def _kept_one(redis_url: str, retry_for_s: float) -> tuple[_Stalled, WorkerSession]:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery = _Stalled(redis.Redis.from_url(redis_url))
    return delivery, WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=retry_for_s))


async def _cut(delivery: _Stalled, session: WorkerSession) -> None:
    """Claim the item and cut its completion on the wire (the drain's deadline): kept to resend."""
    (held,) = await session.claim(1)
    completing = asyncio.create_task(session.complete(held, RESULT))
    await asyncio.to_thread(delivery.cut.wait, 60)
    completing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await completing
    delivery.stall.set()


def test_the_drains_last_try_of_a_kept_completion_keeps_to_its_bound_on_a_stalled_redis(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """``settle(0.2)``: the try waits on Redis past its bound, so it is left to lapse, ``lost``, by
    then, not once Redis answers (20 s here is a fault bound, the drain's is 0.2 s)."""
    delivery, session = _kept_one(redis_url, retry_for_s=0.0)

    async def run() -> int:
        await _cut(delivery, session)
        try:
            async with asyncio.timeout(20):
                await session.resends.settle(0.2)
        finally:
            delivery.go.set()
        return session.stats.lost

    assert asyncio.run(run()) == 1


def test_a_heartbeats_resend_on_a_redis_that_does_not_answer_is_one_try_not_the_retry_window(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The session's retry window is 30 s; the heartbeat's resend tries once and keeps the result for
    the next beat (20 s here is a fault bound)."""
    delivery, session = _kept_one(redis_url, retry_for_s=30.0)

    async def run() -> int:
        await _cut(delivery, session)
        delivery.go.set()  # each try now refused at once: a Redis that is down
        async with asyncio.timeout(20):
            await session.heartbeat()
        return len(session.resends)

    assert asyncio.run(run()) == 1


def test_a_pull_heartbeats_resend_on_a_redis_that_does_not_answer_is_one_try_and_keeps_the_lease(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Pull mode keeps the lease of a ``/done`` cut on the wire for the worker's retry; the heartbeat
    finds it gone (the completion landed) and asks once, Redis not answering: no retry window (30 s),
    and the lease stays held for the next beat or the worker's retry (20 s is a fault bound)."""
    delivery, session = _kept_one(redis_url, retry_for_s=30.0)

    async def run() -> int:
        (held,) = await session.claim(1)
        completing = asyncio.create_task(session.complete(held, RESULT, keep_unanswered=True))
        await asyncio.to_thread(delivery.cut.wait, 60)
        completing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await completing
        delivery.stall.set()
        delivery.go.set()  # each try now refused at once
        async with asyncio.timeout(20):
            assert await session.heartbeat() == []
        return len(session.holdings)

    assert asyncio.run(run()) == 1


def test_a_kept_completion_is_sent_again_at_a_heartbeat_that_also_extends_other_leases(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The resend is not only for a sidecar with nothing else held: an item still running here does
    not keep the other's result waiting."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    delivery = _Down(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> list[int]:
        finished, _running = await session.claim(2)
        delivery.out.set()
        with contextlib.suppress(redis.ConnectionError):
            await session.complete(finished, RESULT)
        delivery.out.clear()
        assert await session.heartbeat() == []
        return [len(session.resends), len(session.holdings), session.stats.accepted]

    assert asyncio.run(run()) == [0, 1, 1]
