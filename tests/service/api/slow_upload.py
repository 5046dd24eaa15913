"""An app on a clock of the test's, and the client's side of a slow upload to it: what the tests of the
caller's deadline (``service/pipeline/deadline.py``) run on, so that none of their assertions depends
on how fast the host is. The clock stands still but where the test moves it (a body's chunks do as
they are fed), so a deadline on it has what is left of it throughout the request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.app import create_app
from service.context import Context
from service.delivery import keys
from service.pipeline import deadline
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot

CHUNKS = 4  # the messages a body is fed in
STEP = 7  # the step the tests' bodies name (``batch_body(step=STEP)``)
LATE = keys.schedule_keys("late")  # the tests' caller-chosen id


class Clock:
    """A clock that stands still but when the test moves it."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class SlowUpload:
    """The client's side of a slow upload: each request's body fed in ``CHUNKS`` messages, ``clock``
    moved ``chunk_s`` before each is handed over (the time its bytes took to arrive)."""

    def __init__(self, app: ASGIApp, clock: Clock, chunk_s: float) -> None:
        self.app, self.clock, self.chunk_s = app, clock, chunk_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        fed = 0

        async def slowly() -> Message:
            nonlocal chunks, fed
            if fed == 0:
                body = (await receive()).get("body", b"")
                size = -(-len(body) // CHUNKS)
                chunks = [body[i * size : (i + 1) * size] for i in range(CHUNKS)]
            if fed == CHUNKS:
                return await receive()  # the body is in: what the client sends after it
            self.clock.now += self.chunk_s
            fed += 1
            return {"type": "http.request", "body": chunks[fed - 1], "more_body": fed < CHUNKS}

        await self.app(scope, slowly, send)


SlowClient = Callable[[float], tuple[TestClient, FastAPI]]


@contextmanager
def slow_clients(redis_url: str, tmp_path: Path) -> Iterator[SlowClient]:
    """Open apps on clocks of their own, each request's body taking ``chunk_s`` x ``CHUNKS`` of its
    app's clock to arrive; closed as the block ends."""
    opened: list[TestClient] = []

    def factory(chunk_s: float) -> tuple[TestClient, FastAPI]:
        clock = Clock()
        settings = Settings(redis_url=redis_url, model_dir=str(tmp_path / "models"))
        app = create_app(settings, clock=clock)
        client = TestClient(SlowUpload(app, clock, chunk_s), raise_server_exceptions=False)
        opened.append(client.__enter__())
        return client, app

    try:
        yield factory
    finally:
        for client in opened:
            client.__exit__(None, None, None)


def in_flight_when_it_waits_for_a_slot(
    app: FastAPI, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, int]]:
    """What each request had written when it came to the plan slots, read from Redis there: its
    in-flight mark (``LATE``'s) and its step's planning entries (``STEP``'s)."""
    ctx: Context = app.state.context
    slots = ctx.plan_slots
    hold, seen = slots.hold, []

    def seen_then_held(*args: Any, **kwargs: Any) -> Any:
        seen.append((redis_client.exists(LATE.planning), redis_client.zcard(keys.step_planning(STEP))))
        return hold(*args, **kwargs)

    monkeypatch.setattr(slots, "hold", seen_then_held)
    return seen


def refused_late_leaving_nothing(
    client: TestClient,
    app: FastAPI,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    body: dict[str, Any],
    header: str,
    marked: int,
) -> dict[str, Any]:
    """Send ``body`` (step ``STEP``, under the id ``late`` or a drawn one) with the caller's deadline
    header ``header``; it must be refused 504 ``deadline-exceeded`` having written its mark
    (``marked``: 1 under the chosen id) and its step's planning entry as it came in line, then taken
    both back: Redis as it was, the id unknown. The problem document, for what each test adds."""
    in_flight = in_flight_when_it_waits_for_a_slot(app, redis_client, monkeypatch)
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=body, headers={deadline.HEADER: header})
    assert late.status_code == 504
    problem: dict[str, Any] = late.json()
    assert (problem["type"].rsplit("/", 1)[1], problem["field"]) == ("deadline-exceeded", deadline.HEADER)
    assert in_flight == [(marked, 1)]  # written as it came in line, then taken back:
    assert redis_snapshot(redis_client) == before  # no mark, no planning entry, no step, no publish
    assert redis_client.exists(keys.step_planning(STEP), LATE.meta) == 0
    assert client.delete("/schedule/late").status_code == 404
    return problem
