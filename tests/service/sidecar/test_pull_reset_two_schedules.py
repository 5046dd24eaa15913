"""``POST /reset`` answers how many of what it handed back dead-lettered over every schedule the
worker held items of, not only the last one's: the hand-back goes schedule by schedule."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from service.delivery.protocol import Delivery
from service.delivery.records import LeaseSettings, PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item
from tests.service.sidecar.pullclient import serving


def test_a_reset_counts_the_items_dead_lettered_in_every_schedule(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """One attempt each, the first reset refunded: the second reset dead-letters both items."""
    delivery = Delivery.from_url(redis_url)
    lease = LeaseSettings(lease_ttl_ms=30_000, max_attempts=1)
    for schedule_id in ("s", "t"):
        delivery.publish(PublishedSchedule(schedule_id, {"w0": (item(schedule_id, 0, 10),)}, lease=lease))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0"))

    async def run() -> list[dict[str, Any]]:
        async with serving(session) as (client, _):
            answers = []
            for _ in range(2):
                taken = [(await client.get("/next")).json()["schedule_id"] for _ in range(2)]
                assert sorted(taken) == ["s", "t"]
                answers.append((await client.post("/reset")).json())
            return answers

    assert asyncio.run(run()) == [{"released": 2, "dead_lettered": 0}, {"released": 0, "dead_lettered": 2}]
