"""The engine watch's hang bound (``watchdog``): which items it may still hand back, and how soon it looks
for them. Real Redis for the session; the items are held, not run."""

from __future__ import annotations

import asyncio

import httpx
import redis

from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Held, Holdings, lease_id
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.watchdog import EngineWatch, _running
from tests.service.sidecar.procs import item, publish


def _session(redis_client: redis.Redis, holdings: Holdings) -> WorkerSession:
    delivery = Delivery(redis_client)
    publish(delivery, "hangs", {"w0": [item(f"p{i}", 0, 10) for i in range(3)]}, lease_ttl_ms=60_000)
    return WorkerSession(delivery, holdings, SessionSettings("w0"))


def test_an_item_being_completed_or_no_longer_held_is_not_the_hang_bounds_to_hand_back(
    redis_client: redis.Redis,
) -> None:
    """Its answer came (the completion decides) or a heartbeat or stall settled it: handing it back
    too would report one item twice."""
    session = _session(redis_client, Holdings(8))
    runs, reports, lost = asyncio.run(session.claim(8))
    reports.completing = True
    session.holdings.remove(lease_id(lost.lease))
    assert [_running(session, h) for h in (runs, reports, lost)] == [True, False, False]


def test_the_hang_bound_is_looked_for_every_quarter_of_a_bound_shorter_than_the_probe_interval(
    redis_client: redis.Redis,
) -> None:
    """With a 10 s bound and a 10-minute probe interval the overdue item is stopped at the first look,
    2.5 s in (30 s allowed here, for a loaded host), not at the next probe nor after 40 s."""
    now = [0.0]
    session = _session(redis_client, Holdings(8, clock=lambda: now[0]))
    (held,) = asyncio.run(session.claim(1))
    session.holdings.start(held)
    now[0] = 60.0  # a minute on the holdings' clock: past the 10 s bound
    stopped: list[Held] = []

    async def stop(h: Held) -> None:
        stopped.append(h)

    async def scenario() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200)))
        watch = EngineWatch(EngineClient(EngineOptions("http://engine"), http), probe_interval_s=600.0)
        loop = asyncio.create_task(watch.hangs(session, 10.0, stop))
        try:
            async with asyncio.timeout(30.0):
                while not stopped:
                    await asyncio.sleep(0.01)
        finally:
            loop.cancel()
            await http.aclose()

    asyncio.run(scenario())
    assert stopped == [held]
