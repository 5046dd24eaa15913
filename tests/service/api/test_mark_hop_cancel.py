"""A ``POST /schedule`` handler cancelled the native way (``Task.cancel``: uvicorn's graceful-shutdown
timeout) during its in-flight mark's hop to the shared pool leaves no mark (``service/api/mark_hop.py``):
the mark was left to lapse (the plan queue's timeout + the budget + 60 s), and a DELETE meanwhile
answered 202 ``withdrawn`` for a step nobody planned any more. Held by gates on the hop's thread, at
each side of the point where the write is known, never by sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.api import mark_hop
from service.api.plan_thread import GivenUpError
from service.delivery import keys
from service.pipeline.in_flight import Mark
from service.settings import Settings
from tests.service.api.replicas import Gate, cancelled_at, context, replicas, until
from tests.service.api_helpers import batch_body

GONE = keys.schedule_keys("gone")


async def _cancelled_at(gate: Gate, http: httpx.AsyncClient, redis_client: redis.Redis) -> int:
    """Send the step, cancel its handler once its hop's thread reaches ``gate``, then let the thread
    on; whether the id was marked at the cancel."""
    sent = http.post("/schedule", json=batch_body(schedule_id="gone"))
    return await cancelled_at(gate, sent, lambda: int(redis_client.exists(GONE.planning)))


def _unknown_and_free(http: httpx.AsyncClient, redis_client: redis.Redis) -> Any:
    """Once the mark is gone: the id's DELETE is a 404 that withdraws nothing, and the step sent
    again publishes."""

    async def check() -> tuple[int, int, int]:
        await until(lambda: redis_client.exists(GONE.planning) == 0)
        deleted = await http.delete("/schedule/gone")
        withdrawn = int(redis_client.exists(GONE.withdrawn))
        sent_again = await http.post("/schedule", json=batch_body(schedule_id="gone"))
        return deleted.status_code, withdrawn, sent_again.status_code

    return check()


def test_a_handler_cancelled_while_its_mark_is_written_leaves_none(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write has reached Redis and the thread has not returned: the thread takes the mark back."""
    written = Gate()

    async def run() -> tuple[int, int, int, int]:
        async with replicas(live_settings) as [http]:
            ctx = context(http)
            monkeypatch.setattr(ctx.delivery, "mark_planning", written.after(ctx.delivery.mark_planning))
            marked = await _cancelled_at(written, http, redis_client)
            return (marked, *await _unknown_and_free(http, redis_client))

    assert asyncio.run(run()) == (1, 404, 0, 200)


def test_a_handler_cancelled_after_its_mark_was_written_leaves_none(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread has decided (the write done, no give-up seen) and its answer has not reached the
    handler: the handler's give-up takes the mark back, on a thread of its own."""
    decided = Gate()
    monkeypatch.setattr(mark_hop._Hop, "run", decided.after(mark_hop._Hop.run))

    async def run() -> tuple[int, int, int, int]:
        async with replicas(live_settings) as [http]:
            marked = await _cancelled_at(decided, http, redis_client)
            return (marked, *await _unknown_and_free(http, redis_client))

    assert asyncio.run(run()) == (1, 404, 0, 200)


def test_a_hop_given_up_before_its_thread_started_writes_no_mark() -> None:
    """A thread that takes the hop up after the handler gave up (it waited for a token of the
    shared pool) writes nothing, and the handler has nothing to take back."""
    hop = mark_hop._Hop()
    taken: list[str] = []
    assert hop.give_up() is None
    with pytest.raises(GivenUpError):
        hop.run(lambda: taken.append("written") or Mark(None, "gone", ""))  # type: ignore[func-returns-value]
    assert taken == []
