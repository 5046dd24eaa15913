"""The in-flight mark a ``POST /schedule`` under a chosen id holds (``service/pipeline/in_flight.py``):
only a request that will publish holds one, it lives as long as the request may wait in line and plan,
and a Redis that fails to take it back never replaces the request's own answer or error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from service.api.schemas import ScheduleRequest
from service.delivery import keys
from service.pipeline.in_flight import Mark, mark
from service.settings import Settings
from tests.service.api.replicas import context, replicas
from tests.service.api_helpers import batch_body, with_settings

BUDGET_S = 10.0


@contextmanager
def held(marked: Mark) -> Iterator[None]:
    """``marked`` for the block, taken back as it ends, as a request holds its mark until it answers."""
    try:
        yield
    finally:
        marked.release()


def _body(**extra: Any) -> ScheduleRequest:
    body = batch_body(schedule_id="step", time_budget_ms=int(BUDGET_S * 1000), **extra)
    return ScheduleRequest.model_validate(body)


def test_a_dry_run_under_a_chosen_id_holds_no_mark_a_delete_could_withdraw(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """A dry run publishes nothing: marked, a DELETE of its id while it planned would withdraw the id
    for the retention, refusing the real step's publish later."""

    async def run() -> int:
        async with replicas(live_settings) as [http]:
            with held(mark(context(http), _body(publish=False), "step")):
                return int(redis_client.exists(keys.schedule_keys("step").planning))

    assert asyncio.run(run()) == 0


def test_a_mark_outlives_the_wait_in_line_and_the_budget_and_goes_when_the_request_ends(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """Its TTL covers the plan queue's timeout, the budget and the margin: one shorter lapsed while the
    request still waited in line, and a DELETE then answered 404 for a step about to publish."""
    settings = with_settings(live_settings, plan_queue_timeout_s=600)
    planning = keys.schedule_keys("step").planning

    async def run() -> tuple[int, int]:
        async with replicas(settings) as [http]:
            with held(mark(context(http), _body(), "step")):
                ttl_ms = int(redis_client.pttl(planning))
            return ttl_ms, int(redis_client.exists(planning))

    ttl_ms, left = asyncio.run(run())
    assert ttl_ms > (600 + BUDGET_S + keys.PLANNING_MARGIN_S - 5) * 1000
    assert left == 0


def test_a_mark_redis_fails_to_take_back_lapses_and_the_request_s_own_error_goes_up(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The take-back's failure is logged, not raised over what the request answers or raises."""

    def unreachable(schedule_id: str, request_id: str) -> None:
        raise redis.ConnectionError("connection refused")

    async def run(fails: bool) -> None:
        async with replicas(live_settings) as [http]:
            ctx = context(http)
            monkeypatch.setattr(ctx.delivery, "unmark_planning", unreachable)
            with held(mark(ctx, _body(), "step")):
                if fails:
                    raise LookupError("the request's own error")

    asyncio.run(run(fails=False))  # answered: no error
    with pytest.raises(LookupError):
        asyncio.run(run(fails=True))
