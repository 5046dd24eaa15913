"""The pull API while Redis is down: a report it could not deliver answers 503 and keeps the lease.

docs/sidecar.md promises a worker told 503 that its lease is kept and the retry is safe. The sidecar
used to forget the lease the moment the report failed: ``/leases`` no longer listed it, its
heartbeats stopped (it lapsed a TTL later and cost an attempt), and a retried ``/fail`` was answered
``stale`` although the item still sat leased to this worker in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    """A private server with AOF on, so a SIGKILL and restart keep every acknowledged write."""
    with EmbeddedServer(appendonly=True) as server:
        yield server


def _ref(lease: dict[str, Any]) -> dict[str, Any]:
    return {name: lease[name] for name in ("schedule_id", "key", "token")}


def test_a_report_redis_did_not_take_keeps_its_lease_and_its_retry_lands(aof_server: EmbeddedServer) -> None:
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "outage", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=600_000)
    client = redis.Redis.from_url(aof_server.url, decode_responses=True, retry=None)  # no retries of its own
    session = WorkerSession(Delivery(client), Holdings(4), SessionSettings("w0", retry_for_s=0.2))

    async def script(api: httpx.AsyncClient) -> list[Any]:
        done, failed = [(await api.get("/next")).json() for _ in range(2)]
        aof_server.kill()
        refused = [
            (await api.post("/done", json={**_ref(done), "output_tokens": 5})).status_code,
            (await api.post("/fail", json={**_ref(failed), "reason": "engine crashed"})).status_code,
        ]
        kept = sorted(lease["key"] for lease in (await api.get("/leases")).json()["held"])
        await asyncio.to_thread(aof_server.start)
        retried = [
            (await api.post("/done", json={**_ref(done), "output_tokens": 5})).json(),
            (await api.post("/fail", json={**_ref(failed), "reason": "engine crashed"})).json(),
        ]
        return [refused, kept, retried, (await api.get("/leases")).json()["held"]]

    async def run() -> list[Any]:
        app = create_pull_app(session)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pull") as api:
            return await script(api)

    assert asyncio.run(run()) == [
        [503, 503],
        ["a#0", "b#0"],
        [{"outcome": "accepted"}, {"outcome": "requeued"}],
        [],
    ]
    progress = delivery.progress("outage")
    assert (progress.done, progress.queued, progress.running) == (1, 1, 0)
    assert (session.stats.accepted, session.stats.failed) == (1, 1)
