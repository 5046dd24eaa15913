"""A sidecar that finds a schedule empty reaps its lapsed leases, at most every half lease TTL
(docs/sidecar.md, "The loop (push mode)"): an idle fleet polls every 0.2 s, and a reap per poll per sidecar
would be that many scripts on Redis for leases that cannot have lapsed yet. Real Redis; the clock is
the session's monotonic one, moved on by the test (a half TTL of 300 s is not waited out)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import redis

from service.delivery.outcomes import ReapReport
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, LeaseSettings, PublishedSchedule
from service.sidecar import claims
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession

TTL_MS = 600_000  # half of it, 300 s, between two reaps of one schedule


class _CountedReaps(Delivery):
    """Real Redis; remembers which schedules the session asked to reap, in order."""

    reaped: list[str]

    def reap(self, schedule_id: str, now_ms: int | None = None, limit: int = 1000) -> ReapReport:
        self.reaped.append(schedule_id)
        return super().reap(schedule_id, now_ms, limit)


def test_an_idle_sidecar_reaps_a_schedule_at_most_once_every_half_lease_ttl(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(claims, "time", SimpleNamespace(monotonic=lambda: now[0]))
    delivery = _CountedReaps(redis_client)
    delivery.reaped = []
    one = (DeliveryItem("w-0#0", "w-0", 0, 100, 64, 10.0),)
    delivery.publish(PublishedSchedule("idle", {"w": one}, lease=LeaseSettings(lease_ttl_ms=TTL_MS)))
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w"))

    def idle_claims_at(*seconds: float) -> int:
        """Claims that find ``idle`` empty at each of these times; the reaps they sent."""
        before = len(delivery.reaped)
        for at in seconds:
            now[0] = at
            assert asyncio.run(session.claim(4)) == []
        return len(delivery.reaped) - before

    assert [h.lease.key for h in asyncio.run(session.claim(4))] == ["w-0#0"]  # not idle: no reap
    assert delivery.reaped == []
    assert idle_claims_at(1_000.0, 1_000.2, 1_000.4, 1_150.0) == 1  # the first idle poll reaps
    assert idle_claims_at(1_200.0, 1_299.0) == 0  # a quarter TTL on: still within the half
    assert idle_claims_at(1_300.0, 1_300.2, 1_450.0) == 1  # the half TTL is up: once again
    assert delivery.reaped == ["idle", "idle"]
