"""How often a sidecar heartbeats: never so seldom that the leases it holds lapse between beats."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.records import Lease
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.session_settings import heartbeat_every_s
from tests.service.delivery.conftest import schedule
from tests.service.sidecar.procs import cluster, item, publish, run_until

TTL_MS = 900


class _ClockedHeartbeats(Delivery):
    """Real Redis; heartbeats at ``now_ms``, the test's clock on the server's scale, not at its TIME."""

    now_ms: int

    def heartbeat_reaching(
        self, leases: Iterable[Lease], now_ms: int | None = None, reach: Reach | None = None
    ) -> tuple[list[Lease], Reach]:  # what a session's heartbeat calls
        return super().heartbeat_reaching(leases, self.now_ms if now_ms is None else now_ms, reach)


def test_a_heartbeat_interval_past_the_lease_ttl_keeps_the_leases_and_is_warned_about_once(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """--heartbeat-interval 1 against a service's ROLLOUT_LEASE_TTL_MS=300 was kept to (900 here): each lease
    lapsed between two heartbeats, so a live worker lost every item it ran.

    The runner's loop (sleep the session's interval, heartbeat) on a clock the test moves, with the
    service's reap at each beat's instant, just before it: the latest a reaper can look. On the wall
    clock, with a reaper thread, a host at load 13.8 stalled a beat past the TTL's 600 ms of slack and
    lost the lease whatever the interval; kept to the configured 1 s, every reap here takes it back."""
    delivery = _ClockedHeartbeats(redis_client)
    delivery.publish(schedule("s", {"w": 1}, ttl_ms=TTL_MS))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w", heartbeat_interval_s=1.0))
    (held,) = asyncio.run(session.claim(4))
    start = delivery.now_ms = held.lease.deadline_ms - TTL_MS  # the claim's instant on the server's clock
    beats = 0
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        while delivery.now_ms < start + 3 * TTL_MS:  # the runner's heartbeat loop, for 3 TTLs
            delivery.now_ms += round(session.heartbeat_interval() * 1000)  # its sleep
            assert delivery.reap("s", now_ms=delivery.now_ms).workers == ()  # no lease lapsed
            assert asyncio.run(session.heartbeat()) == []  # none lost
            beats += 1
    assert beats == 9  # every 0.3 s
    assert session.stats.lost == 0
    assert [r.getMessage() for r in caplog.records] == [
        f"--heartbeat-interval=1s is not shorter than the lease TTL of a schedule held "
        f"(ROLLOUT_LEASE_TTL_MS={TTL_MS}): every lease would lapse between two heartbeats; "
        "heartbeating every 0.3s (a third of the TTL) instead"
    ]


@pytest.mark.parametrize(
    ("configured_s", "ttls_ms", "every_s"),
    [
        (None, [], 1.0),  # no schedule known yet
        (None, [30_000, 3_000], 1.0),  # a third of the shortest TTL
        (5.0, [30_000], 5.0),  # an interval shorter than the TTL is the operator's to choose
        (0.05, [], 0.05),
        (30.0, [30_000], 10.0),  # equal to the TTL: lapses between beats
        (60.0, [30_000, 90_000], 10.0),
    ],
)
def test_the_heartbeat_interval_is_the_configured_one_only_while_shorter_than_the_lease_ttl(
    configured_s: float | None, ttls_ms: list[int], every_s: float
) -> None:
    interval, warning = heartbeat_every_s(configured_s, ttls_ms)
    assert interval == pytest.approx(every_s)
    assert (warning is None) == (configured_s is None or configured_s == every_s)


class _SeenHeartbeats(Delivery):
    """Real Redis; keeps the leases each heartbeat found current (with their new deadlines)."""

    renewed: list[Lease]

    def heartbeat_reaching(
        self, leases: Iterable[Lease], now_ms: int | None = None, reach: Reach | None = None
    ) -> tuple[list[Lease], Reach]:  # what a session's heartbeat calls
        alive, reach = super().heartbeat_reaching(leases, now_ms, reach)
        self.renewed += alive
        return alive, reach


def test_leases_of_a_shorter_ttl_claimed_while_the_heartbeat_sleeps_are_heartbeated_in_time(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """An idle sidecar that knew only a schedule of 60 s leases slept 20 s between heartbeats; the
    1.5 s lease of a schedule it claimed meanwhile lapsed long before the next beat, was reaped and
    claimed again, over and over: in 15 s the 4 s item ran 5 times and each completion was refused
    stale (accepted 0).

    Here the sidecar sleeps 200 s (600 s leases) when the 12 s lease is claimed, and that lease is
    renewed at its third, 4 s on: Redis extends only a lease still current, so the renewal is the
    proof. On 1.5 s leases a heartbeat held back 1 s while the same process's claims and idle reaps
    still reached the schedule lost the lease whatever the interval (a stall of the whole process is
    graced as an outage: ``pulse`` in common.lua); 12 s leaves 8 s of slack."""
    delivery = Delivery(redis_client)
    publish(delivery, "long", {"w0": [], "w1": [item("other", 0, 10)]}, lease_ttl_ms=600_000)
    seen, published, known = _SeenHeartbeats.from_url(redis_url), list[object](), list[float]()
    seen.renewed = []
    session = WorkerSession(seen, Holdings(4), SessionSettings("w0", steal=False))

    def short_lease_renewed() -> bool:
        if not known and session.heartbeat_interval() > 100:  # a claim has met the long schedule
            known.append(time.monotonic())
        if not known or time.monotonic() - known[0] < 1.5:  # past a 1 s sleep begun before that
            return False
        if not published:
            queues = {"w0": [item("short", 0, 16_000)]}  # ~40 s on the engine: running at the beat
            published.append(publish(delivery, "short", queues, lease_ttl_ms=12_000))
        return any(lease.schedule_id == "short" for lease in seen.renewed)

    with cluster(tmp_path) as procs:
        engine = procs.engine_threads({"engine": 0.3})["engine"]
        settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.1)  # then the item is handed back
        sidecar = Sidecar(session, EngineClient.open(EngineOptions(engine)), settings)
        stats = run_until(sidecar, short_lease_renewed, timeout_s=60.0)
    assert published, "the sidecar never met the long schedule"
    assert {lease.key for lease in seen.renewed} == {"short#0"}  # renewed, before the 200 s were up
    assert (stats.lost, stats.stale, stats.released) == (0, 0, 1)


def test_leases_found_gone_at_a_heartbeat_are_counted_lost_each_or_cancelled_by_schedule(
    redis_client: redis.Redis,
) -> None:
    """Taken back after lapsing: ``lost``, one per lease; of a schedule the trainer cancelled:
    ``cancelled``, and not ``lost`` (an expected end, not a fault)."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("lapsed", {"w": 2}, ttl_ms=TTL_MS))
    delivery.publish(schedule("given-up", {"w": 3}, ttl_ms=TTL_MS))
    session = WorkerSession(delivery, Holdings(8), SessionSettings("w"))
    assert len(asyncio.run(session.claim(8))) == 5
    delivery.reap("lapsed", now_ms=int(time.time() * 1000) + 60_000)  # a minute on: both lapsed
    delivery.cancel("given-up")
    gone = asyncio.run(session.heartbeat())
    assert sorted(held.lease.schedule_id for held in gone) == ["given-up"] * 3 + ["lapsed"] * 2
    assert (session.stats.lost, session.stats.cancelled) == (2, 3)
    assert session.holdings.leases() == []
