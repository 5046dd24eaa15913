"""A push session's completion kept for a resend, staged for the tests of when it is given up: a real
``Delivery`` whose completions fail on demand (heartbeats still answered), a session that claimed
short leases, and one on a clock the test moves (``kept_on_a_hand_clock``: a completion refused by a
replica, or an outage's, is kept on it). The resend-bound, resend-bound-clock and cluster-transient
tests share them, so a change to how a kept completion is staged reaches them all, rather than
through one test module's private names."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.reaper import DEFAULT_INTERVAL_S
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

KEPT_TTL_MS = 300  # ``kept_session``'s leases: real time, where the reaper passes outweigh the TTLs


class FailingCompletions(Delivery):
    """A real ``Delivery`` whose completions raise ``error`` (never reaching Redis) while it is set;
    heartbeats and every other call go through."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.error: Exception | None = None
        self.lock = threading.Lock()

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        with self.lock:
            error = self.error
        if error is not None:
            raise error
        return super().complete_many(*args, **kwargs)


def kept_session(redis_url: str, keys: list[str]) -> tuple[FailingCompletions, WorkerSession]:
    """A session that claimed ``keys`` of schedule ``s`` (300 ms leases)."""
    publish(
        Delivery.from_url(redis_url), "s", {"w0": [item(k, 0, 10) for k in keys]}, lease_ttl_ms=KEPT_TTL_MS
    )
    delivery = FailingCompletions(redis.Redis.from_url(redis_url))
    return delivery, WorkerSession(delivery, Holdings(len(keys)), SessionSettings("w0", retry_for_s=0.0))


CLOCK_TTL_S = 10.0  # ``kept_on_a_hand_clock``'s lease: long enough for each part of the bound to show
GIVE_UP_AT_S = 2 * CLOCK_TTL_S + 2 * DEFAULT_INTERVAL_S  # two lease TTLs and two reaper passes
# what a replica answers a write: the completion is refused while Redis answers
REFUSED = redis.ReadOnlyError("READONLY You can't write against a read only replica.")


class HandClock:
    """The resends' clock, moved by the test by hand (``now``), from 1000 s."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def kept_on_a_hand_clock(
    redis_url: str, items: int = 1
) -> tuple[FailingCompletions, WorkerSession, HandClock]:
    """A session on a clock the test moves, its schedule ``t`` of ``items`` items for ``w0`` (``a``,
    ``b``, ...), whose completions the test then has refused by a replica (kept) or land."""
    queue = [item(chr(ord("a") + i), i, 10) for i in range(items)]
    publish(Delivery.from_url(redis_url), "t", {"w0": queue}, lease_ttl_ms=int(CLOCK_TTL_S * 1000))
    delivery, session = kept_session(redis_url, [])
    clock = HandClock()
    session.resends.clock = clock
    return delivery, session, clock


async def keep_refused(delivery: FailingCompletions, session: WorkerSession) -> None:
    """The session's one lease claimed and its completion refused (``REFUSED``): kept for a resend."""
    (held,) = await session.claim(1)
    with delivery.lock:
        delivery.error = REFUSED
    with pytest.raises(redis.ReadOnlyError):  # unanswered: kept for a resend
        await session.complete(held, RESULT)


def kept_lost_at(clock: HandClock, session: WorkerSession, at_s: float) -> tuple[int, int]:
    """(kept, lost) once the resends' round runs ``at_s`` past the clock's start."""
    clock.now = 1000.0 + at_s
    asyncio.run(session.resends.kept())
    return len(session.resends), session.stats.lost
