"""A session's reports through a Redis outage (``outage_retry``): how often a call is tried again, and
for how long. No Redis: the call is a function that fails as a connection to a dead server does."""

from __future__ import annotations

import asyncio

import pytest
import redis

from service.sidecar.outage_retry import OutageRetry


def test_a_report_is_retried_after_50_ms_then_twice_as_long_each_time_up_to_2_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module's promise ("every 50 ms to 2 s"): soon after a blip, and not hammering a server
    that stays down; the pauses are recorded rather than slept."""
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", pause)
    failures = iter(range(8))

    def report() -> str:
        if next(failures, None) is not None:
            raise redis.ConnectionError("connection refused")
        return "landed"

    assert asyncio.run(OutageRetry(retry_for_s=600.0).call("complete", report)) == "landed"
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
