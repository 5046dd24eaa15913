"""The pull API served in-process to a test's script, a schedule of one item for it, the report
body of a pulled lease, and ``/next`` long-polled for several.

Every pull test plays the worker through ``serving`` (or ``with_api``/``serve``, which run a script
in it): a client of ``create_pull_app`` over ASGI, no socket, so the test states what the worker
does and sees, not how the app is reached."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI

from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.connecting import Connecting
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


def asgi_client(app: FastAPI, **client_options: Any) -> httpx.AsyncClient:
    """A client of ``app`` in this process, over ASGI: no socket, and no lifespan unless the caller
    enters ``app.router.lifespan_context``. Addressed to ``localhost``, as the pull API answers only a
    loopback ``Host`` (its DNS rebinding guard). Enter it (``async with``) to open it."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost", **client_options
    )


@contextlib.asynccontextmanager
async def serving(
    session: WorkerSession | Connecting, *, lifespan: bool = False, **app_options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, PullState]]:
    """A worker's client of ``create_pull_app(session, **app_options)`` and the app's ``PullState``.
    Without ``lifespan`` no takeover nor heartbeat runs but those the test calls (``state.beat()``);
    with it they run as ``run_pull`` serves the app, and its shutdown (the hand-back) runs after the
    client is closed, as the block ends."""
    app = create_pull_app(session, **app_options)
    async with contextlib.AsyncExitStack() as stack:
        if lifespan:
            await stack.enter_async_context(app.router.lifespan_context(app))
        client = await stack.enter_async_context(asgi_client(app))
        yield client, app.state.pull


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
        async with serving(session) as (client, _):
            return await script(client)

    return asyncio.run(run())


def serve(session: WorkerSession, script: StateScript, **app_options: Any) -> Any:
    """What ``script(client, state)`` returns, run against ``create_pull_app(session, **app_options)``
    over ASGI with no lifespan: no heartbeat runs but those the script calls (``state.beat()``)."""

    async def run() -> Any:
        async with serving(session, **app_options) as (client, state):
            return await script(client, state)

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


def outlived_done(lease: Lease) -> dict[str, Any]:
    """The ``/done`` (5 output tokens) a worker that outlived a killed sidecar sends for what that
    sidecar handed it: the takeover tests' report of a lease handed back under it."""
    return {"schedule_id": lease.schedule_id, "key": lease.key, "token": lease.token, "output_tokens": 5}


async def pulled(client: httpx.AsyncClient, n: int, timeout_s: float) -> list[dict[str, Any]]:
    """Up to ``n`` leases from ``/next``, long-polling until ``timeout_s`` has passed; a 503 (still
    connecting to Redis) is asked again shortly."""
    leases: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(leases) < n and time.monotonic() < deadline:
        answer = await client.get("/next", params={"wait_s": 0.5})
        if answer.status_code == 200:
            leases.append(answer.json())
        elif answer.status_code == 503:
            await asyncio.sleep(0.1)
    return leases
