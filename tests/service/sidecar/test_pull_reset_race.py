"""A ``POST /reset`` hands back only what is still held when it gets to it, so each lease ends once.

``/reset`` hands back what was claimed ahead of ``/next`` (never handed out) first, then what the dead
process was handed. Its list was read once, before the first hand-back: a ``/done`` of a handed-out
item that landed while that hand-back waited on Redis (the dead process's last report, still in the
socket) was then handed back too, and refused as gone: its lease counted ``accepted`` and ``lost``,
``claimed`` behind what ended.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import redis

from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving, until


class _SlowFirstRelease(Delivery):
    """Real Redis, but the first hand-back waits until ``go`` (a slow Redis); ``reached`` says so."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.reached, self.go = threading.Event(), threading.Event()

    def release(
        self, leases: Sequence[Lease], now_ms: int | None = None, died: str = ""
    ) -> list[ReleaseOutcome]:
        if not self.reached.is_set():
            self.reached.set()
            self.go.wait(timeout=60)
        return super().release(leases, now_ms, died)


def test_a_done_that_lands_while_a_reset_hands_back_is_not_handed_back_too(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, 60_000)
    delivery = _SlowFirstRelease(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0"))

    async def run() -> tuple[int, dict[str, Any]]:
        async with serving(session) as (client, _):
            lease = (await client.get("/next")).json()  # a#0, handed to the worker
            assert len(await session.claim(1)) == 1  # b#0, claimed ahead of /next
            reset = asyncio.create_task(client.post("/reset"))
            await until(delivery.reached.is_set, "hand-back of b#0 reaching Redis")
            done = await client.post("/done", json=report_body("done", lease))  # the dead one's last
            delivery.go.set()
            return done.status_code, (await reset).json()

    assert asyncio.run(run()) == (200, {"released": 1, "dead_lettered": 0})
    stats = session.stats
    assert (stats.claimed, stats.accepted, stats.released, stats.lost) == (2, 1, 1, 0)
