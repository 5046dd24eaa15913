"""The sidecar's local pull mode: a worker process that drives its engine itself asks for work here.

Some rollout workers cannot be fed over HTTP (the engine runs in-process, as in veRL's hybrid
engine or an SGLang ``Engine`` object). For them the sidecar serves on loopback:

* ``GET /next`` -> 200 with one item and its lease (``schedule_id``, ``key``, ``token``, ``item``,
  and ``params``: the sampling fields to generate this sample with, its seed offset as the push
  mode's), or 204 when there is nothing to do now (``?wait_s=`` long-polls up to 30 s);
* ``POST /done`` with ``schedule_id``, ``key``, ``token``, ``output_tokens`` (and optionally
  ``finish_reason``, ``output``, ``wall_time_s``, ``reward``, ``extra``) -> 200 ``{"outcome":
  "accepted"|"duplicate"}``, or 409 ``{"outcome": "stale"}`` when the lease was lost and 404
  ``{"outcome": "unknown_schedule"}`` when the schedule is gone (drop the result either way);
  repeating a ``/done`` whose reply was lost is safe;
* ``POST /fail`` with ``schedule_id``, ``key``, ``token``, ``reason`` -> the item is retried or
  dead-lettered;
* ``GET /leases`` -> the leases held for the worker and those lost since the last call (stop them).

The sidecar claims, steals, heartbeats and completes on the worker's behalf, within the same slot and
KV admission limits as the push mode. It keeps leases alive only while the worker shows signs of
life: if it calls none of these endpoints for ``idle_timeout_s``, heartbeats stop and its leases
lapse, so a dead worker process is noticed even though the sidecar lives on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from service.delivery.errors import UnknownScheduleError
from service.delivery.records import CompletionOutcome, TrajectoryResult
from service.sidecar.engine_client import sample_params
from service.sidecar.holdings import Held
from service.sidecar.session import WorkerSession

MAX_WAIT_S = 30.0
log = logging.getLogger("service.sidecar")


class _LeaseRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedule_id: str
    key: str
    token: int


class DoneBody(_LeaseRef):
    """A finished trajectory, as the worker reports it."""

    output_tokens: int = Field(ge=0)
    finish_reason: str = "stop"
    output: str = ""
    wall_time_s: float = Field(default=0.0, ge=0)
    reward: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class FailBody(_LeaseRef):
    """A trajectory the worker could not run."""

    reason: str = "worker reported failure"


class PullState:
    """The pull session: liveness of the worker process and the leases it lost."""

    def __init__(self, session: WorkerSession, idle_timeout_s: float) -> None:
        self.session = session
        self.idle_timeout_s = idle_timeout_s
        self.last_seen = time.monotonic()
        self.lost: list[dict[str, Any]] = []
        self.lock = asyncio.Lock()

    def touch(self) -> None:
        """The worker called us: it is alive, keep its leases."""
        self.last_seen = time.monotonic()

    async def heartbeats(self) -> None:
        """Heartbeat the worker's leases while it is alive; record the ones found lost."""
        while True:
            await asyncio.sleep(self.session.heartbeat_interval())
            if time.monotonic() - self.last_seen > self.idle_timeout_s:
                continue  # the worker went quiet: let its leases lapse so they are redelivered
            try:
                lost = await self.session.heartbeat()
            except Exception:  # never let the heartbeat loop die: every lease would lapse
                log.exception("heartbeat failed")
                continue
            self.lost += [_lease_json(held) for held in lost]

    async def next_item(self, wait_s: float) -> Held | None:
        """Start the oldest waiting lease that fits, else claim one; poll up to ``wait_s``."""
        deadline = time.monotonic() + min(wait_s, MAX_WAIT_S)
        while True:
            async with self.lock:
                held = await self._take_one()
            if held is not None or time.monotonic() >= deadline:
                return held
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    async def _take_one(self) -> Held | None:
        holdings = self.session.holdings
        waiting = holdings.waiting()
        if not waiting and holdings.free_slots() > 0:
            waiting = await self.session.claim(1)
        if not waiting or not holdings.can_start(waiting[0]):
            return None  # nothing to do, or the oldest waiting item does not fit the KV cache yet
        holdings.start(waiting[0])
        return waiting[0]


def create_pull_app(session: WorkerSession, idle_timeout_s: float = 60.0) -> FastAPI:
    """Build the loopback pull API around ``session``; heartbeats run while the server runs."""
    state = PullState(session, idle_timeout_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(state.heartbeats())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.release(session.holdings.all())  # shutdown: hand back whatever the worker held

    app = FastAPI(title="rollout-scheduler sidecar pull API", lifespan=lifespan)
    app.state.pull = state

    @app.exception_handler(redis.RedisError)
    async def redis_down(_: Request, exc: redis.RedisError) -> JSONResponse:
        return JSONResponse({"error": f"redis unavailable: {exc}"}, status_code=503)

    @app.exception_handler(UnknownScheduleError)
    async def schedule_gone(_: Request, exc: UnknownScheduleError) -> JSONResponse:
        # never published here, or its retention passed while the worker ran it: drop the result
        return JSONResponse({"outcome": "unknown_schedule", "error": str(exc)}, status_code=404)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "worker_id": session.settings.worker_id, "held": len(session.holdings)}

    @app.get("/next", response_model=None)
    async def next_item(wait_s: float = Query(0.0, ge=0.0, le=MAX_WAIT_S)) -> dict[str, Any] | Response:
        state.touch()
        held = await state.next_item(wait_s)
        state.touch()
        return Response(status_code=204) if held is None else _lease_json(held)

    @app.post("/done")
    async def done(body: DoneBody) -> JSONResponse:
        state.touch()
        held = session.holdings.get((body.schedule_id, body.key, body.token))
        extra = dict(body.extra)
        if held is not None:  # what the worker does not say, the sidecar measured: speed learning
            extra.setdefault("concurrency", round(session.holdings.mean_concurrency(held), 3))
            session.holdings.observe(body.output_tokens, body.wall_time_s)  # KV admission's decode rate
        result = TrajectoryResult(
            output_tokens=body.output_tokens,
            finish_reason=body.finish_reason,
            wall_time_s=body.wall_time_s,
            output=body.output,
            reward=body.reward,
            extra=extra,
        )
        if held is not None:
            outcome = await session.complete(held, result)
        else:
            outcome = await session.complete_key(body.schedule_id, body.key, body.token, result)
        status = 409 if outcome is CompletionOutcome.STALE else 200
        return JSONResponse({"outcome": outcome.value}, status_code=status)

    @app.post("/fail")
    async def fail(body: FailBody) -> dict[str, Any]:
        state.touch()
        held = session.holdings.get((body.schedule_id, body.key, body.token))
        if held is None:
            return {"outcome": "stale"}
        return {"outcome": (await session.fail(held, body.reason)).value}

    @app.get("/leases")
    async def leases() -> dict[str, Any]:
        state.touch()
        lost, state.lost = state.lost, []
        return {"held": [_lease_json(h) for h in session.holdings.all()], "lost": lost}

    return app


def _lease_json(held: Held) -> dict[str, Any]:
    lease = held.lease
    return {
        "schedule_id": lease.schedule_id,
        "key": lease.key,
        "token": lease.token,
        "attempt": lease.attempt,
        "deadline_ms": lease.deadline_ms,
        "item": lease.item.to_json(),
        "params": sample_params(lease.item),  # the sampling fields to send for this sample
    }
