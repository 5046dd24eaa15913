"""A pull worker process killed while its ``GET /next?wait_s=...`` long-polls leaves that request
running in the sidecar. Its successor calls ``POST /reset`` first; an item published after that was
handed to the dead process's long poll, which nobody reads: it sat held (heartbeated) until the hold
bound (an hour by default) and came back with an attempt spent. A long poll begun before a reset
now ends with 204 at the reset, and the item goes to the new process. Real Redis, the pull app in
process (found by a live walk, docs/experiments.md)."""

from __future__ import annotations

import asyncio

import redis

from service.delivery.protocol import Delivery
from service.delivery.records import PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item
from tests.service.sidecar.pullclient import asgi_client


def test_a_long_poll_begun_before_a_reset_hands_nothing_out_and_the_new_process_gets_the_item(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w0"))

    async def run() -> tuple[int, int, dict[str, int], int, int]:
        async with asgi_client(create_pull_app(session), timeout=30) as client:
            orphan = asyncio.create_task(client.get("/next", params={"wait_s": 3}))  # the dead process's
            await asyncio.sleep(0.3)
            reset = (await client.post("/reset")).json()  # its successor starts
            delivery.publish(PublishedSchedule("pull-orphan", {"w0": (item("p", 0, 5),)}))
            stale = await orphan
            fresh = await client.get("/next", params={"wait_s": 3})
            held = len((await client.get("/leases")).json()["held"])
            attempt = fresh.json()["attempt"] if fresh.status_code == 200 else 0
            return stale.status_code, fresh.status_code, reset, held, attempt

    stale, fresh, reset, held, attempt = asyncio.run(run())
    assert reset == {"released": 0, "dead_lettered": 0}
    assert stale == 204
    assert (fresh, attempt, held) == (200, 1, 1)
