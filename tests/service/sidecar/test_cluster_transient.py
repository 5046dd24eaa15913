"""A sidecar's reports to Redis through a Redis Cluster's own transient errors (``outage_retry.py``).

A cluster client learns that a key's slot is not served now in ways no ``ConnectionError`` covers: a
node's ``CLUSTERDOWN`` or ``TRYAGAIN`` (``ClusterDownError``, ``TryAgainError``), its redirections run
out (``ClusterError``), its slot map with no node for the slot (``SlotNotCoveredError``) or no node
answering a refresh of it (``RedisClusterUnreachableError``), or the map it rebuilt short of a slot (a
bare ``RedisClusterException``): the last three no ``RedisError`` at all.
``TRANSIENT`` listed none, so a push report that met one was not retried through it, a kept report's
resend counted it as Redis answering (the give-up clock ran on), and a heartbeat raised it every beat,
a traceback each. The real server answers; one ``Delivery`` method is wrapped to raise the real class.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from typing import Any

import pytest
import redis
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    RedisClusterException,
    RedisClusterUnreachableError,
    SlotNotCoveredError,
    TryAgainError,
)

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.push_resends import (
    GIVE_UP_AT_S,
    REFUSED,
    keep_refused,
    kept_lost_at,
    kept_on_a_hand_clock,
)

UNSERVED = {  # a slot not served now, as each way a cluster client learns it raises it
    "clusterdown": ClusterDownError("CLUSTERDOWN Hash slot not served"),
    "tryagain": TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    "redirections-ran-out": ClusterError("TTL exhausted."),
    "slot-not-covered": SlotNotCoveredError('Slot "5" is not covered by the cluster.'),
    "cluster-unreachable": RedisClusterUnreachableError("Redis Cluster cannot be connected."),
    "slot-map-short": RedisClusterException("All slots are not covered after query all startup_nodes."),
}


class _Unserved(Delivery):
    """A real ``Delivery`` whose completions, failure reports and heartbeats raise ``errors[name]``
    once each (taken from the list as they are raised); every other call goes through."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.errors: dict[str, list[Exception]] = {"complete_many": [], "fail": [], "heartbeat": []}
        self.lock = threading.Lock()

    def _raise_next(self, name: str) -> None:
        with self.lock:
            error = self.errors[name].pop(0) if self.errors[name] else None
        if error is not None:
            raise error

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        self._raise_next("complete_many")
        return super().complete_many(*args, **kwargs)

    def fail(self, *args: Any, **kwargs: Any) -> ReleaseOutcome:
        self._raise_next("fail")
        return super().fail(*args, **kwargs)

    def heartbeat_reaching(
        self, leases: Iterable[Lease], now_ms: int | None = None, reach: Reach | None = None
    ) -> tuple[list[Lease], Reach]:  # what a session's heartbeat calls
        self._raise_next("heartbeat")
        return super().heartbeat_reaching(leases, now_ms, reach)


def _push_session(redis_url: str) -> tuple[_Unserved, WorkerSession]:
    """A push session (a 600 s retry window) over one item of schedule ``s``."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery = _Unserved(redis.Redis.from_url(redis_url))
    return delivery, WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=600.0))


@pytest.mark.parametrize("error", UNSERVED.values(), ids=UNSERVED.keys())
def test_a_push_completion_that_meets_an_unserved_slot_is_retried_and_accepted_once(
    redis_client: redis.Redis, redis_url: str, error: Exception
) -> None:
    """Before: the error went up at once, the completion kept for a heartbeat's resend, not accepted."""
    delivery, session = _push_session(redis_url)

    async def run() -> CompletionOutcome:
        (held,) = await session.claim(1)
        delivery.errors["complete_many"] = [error, error]
        return await session.complete(held, RESULT)

    assert asyncio.run(run()) is CompletionOutcome.ACCEPTED
    assert (session.stats.accepted, len(session.resends), delivery.errors["complete_many"]) == (1, 0, [])
    assert [r.key for r in Delivery.from_url(redis_url).read_results("s")] == ["a#0"]


@pytest.mark.parametrize("error", UNSERVED.values(), ids=UNSERVED.keys())
def test_a_push_failure_report_that_meets_an_unserved_slot_is_retried_and_taken_once(
    redis_client: redis.Redis, redis_url: str, error: Exception
) -> None:
    delivery, session = _push_session(redis_url)

    async def run() -> ReleaseOutcome:
        (held,) = await session.claim(1)
        delivery.errors["fail"] = [error]
        return await session.fail(held, "engine died")

    assert asyncio.run(run()) is ReleaseOutcome.REQUEUED
    assert (session.stats.failed, len(session.resends), delivery.errors["fail"]) == (1, 0, [])


@pytest.mark.parametrize("error", UNSERVED.values(), ids=UNSERVED.keys())
def test_a_heartbeat_that_meets_an_unserved_slot_is_an_outage_told_once_not_a_raise(
    redis_client: redis.Redis, redis_url: str, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``heartbeat`` raised it, and the loops logged a traceback at every beat."""
    delivery, session = _push_session(redis_url)

    async def run() -> list[tuple[list[str], bool]]:
        await session.claim(1)
        delivery.errors["heartbeat"] = [error, error]
        beats = []
        for _ in range(3):  # two beats meet it, the third goes through
            lost = await session.heartbeat()
            beats.append(([h.lease.key for h in lost], session.heartbeats_failing))
        return beats

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        assert asyncio.run(run()) == [([], True), ([], True), ([], False)]
    said = [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records]
    assert said == [
        ("WARNING", "heartbeat failed, leases keep their deadlines"),
        ("INFO", "heartbeats go through again"),
    ]
    assert [h.lease.key for h in session.holdings.all()] == ["a#0"]


def test_a_resend_that_meets_an_unserved_slot_does_not_age_a_kept_completion(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """No lease held (the resend's own try probes Redis), its slot unserved from 1 s to 15 s: the
    reaper cannot reach its schedule either, so the bound counts from 15 s. Before: the error counted
    as Redis answering, and the completion was given up ``lost`` a bound after its keep, 14 s early."""
    delivery, session, clock = kept_on_a_hand_clock(redis_url)
    asyncio.run(keep_refused(delivery, session))
    assert kept_lost_at(clock, session, 0.5) == (1, 0)
    with delivery.lock:
        delivery.error = UNSERVED["slot-not-covered"]
    for at_s in (1.0, 14.0):
        clock.now = 1000.0 + at_s
        asyncio.run(session.resends.kept(probe=True))
    with delivery.lock:
        delivery.error = REFUSED
    assert kept_lost_at(clock, session, 15.0) == (1, 0)  # answered again: it ages from here
    assert kept_lost_at(clock, session, GIVE_UP_AT_S + 0.5) == (1, 0)  # a bound past its keep: not yet
    assert kept_lost_at(clock, session, 15.0 + GIVE_UP_AT_S + 0.5) == (0, 1)
