"""The pull API served in-process to a test's script, a schedule of one item for it, and the report
body of a pulled lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish

Script = Callable[[httpx.AsyncClient], Awaitable[Any]]
StateScript = Callable[[httpx.AsyncClient, PullState], Awaitable[Any]]


def session_of(redis_url: str, slots: int = 4, worker: str = "w0") -> WorkerSession:
    """A fresh session of ``worker`` with ``slots`` slots, for a test that reads its counters after."""
    return WorkerSession(Delivery.from_url(redis_url), Holdings(slots), SessionSettings(worker))


def with_api(
    redis_url: str,
    script: Script,
    slots: int = 4,
    worker: str = "w0",
    session: WorkerSession | None = None,
) -> Any:
    """What ``script`` returns, run against a fresh pull API of ``session`` (else a fresh session of
    ``worker`` with ``slots`` slots)."""
    session = session or session_of(redis_url, slots, worker)

    async def run() -> Any:
        app = create_pull_app(session)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as client:
            return await script(client)

    return asyncio.run(run())


def serve(session: WorkerSession, script: StateScript, **app_options: Any) -> Any:
    """What ``script(client, state)`` returns, run against ``create_pull_app(session, **app_options)``
    over ASGI with no lifespan: no heartbeat runs but those the script calls (``state.beat()``)."""

    async def run() -> Any:
        app = create_pull_app(session, **app_options)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await script(client, app.state.pull)

    return asyncio.run(run())


def done_body(lease: dict[str, Any], tokens: int) -> dict[str, Any]:
    """The ``POST /done`` body reporting ``tokens`` output tokens for a lease ``GET /next`` gave."""
    return {
        "schedule_id": lease["schedule_id"],
        "key": lease["key"],
        "token": lease["token"],
        "output_tokens": tokens,
    }


def report_body(kind: str, lease: dict[str, Any]) -> dict[str, Any]:
    """The body of a ``/done`` (10 output tokens) or a ``/fail`` of a lease ``GET /next`` gave."""
    body = {key: lease[key] for key in ("schedule_id", "key", "token")}
    return body | ({"output_tokens": 10} if kind == "done" else {"reason": "oom"})


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (a thread's event, a task, a log line), yielding to the app meanwhile."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        await asyncio.sleep(0.01)


def publish_one(redis_url: str, schedule_id: str) -> Delivery:
    """A client of ``redis_url`` that published ``schedule_id``: one item for ``w0``, 30 s leases."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, schedule_id, {"w0": [item("a", 0, 10)]}, lease_ttl_ms=30_000)
    return delivery
