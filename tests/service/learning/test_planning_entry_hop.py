"""A ``POST /schedule`` handler cancelled the native way (``Task.cancel``: uvicorn's graceful-shutdown
timeout) during the hop that writes its step's planning entry as it arrives (``step_part.arrive``,
on the in-flight mark's hop: ``service/api/mark_hop.py``) leaves no entry, under a drawn id, which
has no mark: the entry would have kept the step out of an asked-for retrain until its deadline (the
plan queue's timeout + the budget + 60 s). Held by gates on the hop's thread, never by sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from service.api import mark_hop
from service.delivery import keys
from service.settings import Settings
from tests.service.api.replicas import Gate, cancelled_at, context, replicas, until
from tests.service.api_helpers import batch_body

STEP_3 = keys.step_planning(3)


async def _cancelled_at(
    gate: Gate, live_settings: Settings, redis_client: redis.Redis, hook: Any
) -> tuple[int, int, int]:
    """Send a step-3 request under a drawn id, cancel its handler once its hop's thread reaches
    ``gate`` (``hook(ctx)`` sets the gate up), then let the thread on: whether the step's entry was
    there at the cancel, whether it is there once the request is over, and whether the step was
    published (a request given up in its hop is never planned)."""
    async with replicas(live_settings) as [http]:
        hook(context(http))
        sent = http.post("/schedule", json=batch_body(step=3))
        entered = await cancelled_at(gate, sent, lambda: int(redis_client.exists(STEP_3)))
        await until(lambda: redis_client.exists(STEP_3) == 0)
        return entered, int(redis_client.exists(STEP_3)), int(redis_client.exists(keys.step_schedules(3)))


def test_a_handler_cancelled_while_its_entry_is_written_leaves_none(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write has reached Redis and the thread has not returned: the thread takes it back."""
    written = Gate()

    def hook(ctx: Any) -> None:
        monkeypatch.setattr(ctx.delivery, "enter_planning", written.after(ctx.delivery.enter_planning))

    assert asyncio.run(_cancelled_at(written, live_settings, redis_client, hook)) == (1, 0, 0)


def test_a_handler_cancelled_after_its_entry_was_written_leaves_none(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread has decided and its answer has not reached the handler: the handler's give-up
    takes it back, on a thread of its own."""
    decided = Gate()
    monkeypatch.setattr(mark_hop._Hop, "run", decided.after(mark_hop._Hop.run))
    assert asyncio.run(_cancelled_at(decided, live_settings, redis_client, lambda ctx: None)) == (1, 0, 0)
