"""The pull API on a Redis Cluster slot the cluster client cannot reach now: a 503 to retry.

redis-py's cluster client raises errors that are no ``RedisError`` (``SlotNotCoveredError`` during a
reshard); the pull API's table listed ``RedisError`` alone, so the worker was told 500, without
``Retry-After``, for what is Redis not answering now. The real server answers; the claim is wrapped
to raise the real exception class the cluster client raises.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from redis.exceptions import SlotNotCoveredError

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serving


def test_a_claim_the_cluster_client_cannot_route_is_a_503_with_retry_after(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, 600_000)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0", retry_for_s=0.2))

    def uncovered(*_: object, **__: object) -> None:
        raise SlotNotCoveredError('Slot "5" is not covered by the cluster.')

    monkeypatch.setattr(Delivery, "claim", uncovered)

    async def run() -> list[Any]:
        async with serving(session) as (client, _):
            answer = await client.get("/next")
        return [answer.status_code, answer.headers.get("Retry-After"), answer.json()["error"].split(":")[0]]

    assert asyncio.run(run()) == [503, "1", "redis unavailable"]
