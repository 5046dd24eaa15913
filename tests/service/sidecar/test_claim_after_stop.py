"""A push sidecar told to stop while its engine's readiness probe was out sends no claim once the probe
answers: the claim would lease items only for the drain to hand them back, a lease and a release each
for nothing, on a Redis the stop may well be about (docs/sidecar.md, the drain)."""

from __future__ import annotations

import asyncio

import httpx
import redis

from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


def test_a_stop_that_comes_while_the_engine_probe_is_out_claims_nothing_after_it(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "late", {"w0": [item("a", 0, 10), item("b", 0, 10)]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0", steal=False))
    stop, generations = asyncio.Event(), []

    def engine(request: httpx.Request) -> httpx.Response:  # ready, but the stop came while it was asked
        if request.url.path == "/v1/models":
            stop.set()
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 32768}]})
        if request.url.path == "/health":
            return httpx.Response(200)
        generations.append(request.url.path)
        return httpx.Response(503)

    http = httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine")
    client = EngineClient(EngineOptions("http://engine", synthetic_prompts=True), http)
    sidecar = Sidecar(session, client, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=5))

    async def run() -> None:
        try:
            await asyncio.wait_for(sidecar.run(stop), 30.0)
        finally:
            await http.aclose()

    asyncio.run(run())
    assert (session.stats.claimed, session.stats.released) == (0, 0)
    assert delivery.progress("late").queued == 2
    assert generations == []
