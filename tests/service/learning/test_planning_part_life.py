"""How long a ``POST /schedule``'s entry among its step's planning requests lives
(``service.pipeline.step_part``): the plan queue's timeout, the most budget the caller's deadline leaves
the plan, and ``keys.PLANNING_MARGIN_S``, so that a replica dying mid-request keeps the step open
that long at most, and no less than the request itself may take (read from the entry's own score,
Redis's clock, while the request plans); and one whose take-back Redis fails lives to that deadline,
a warning, not an error over the request's answer. Kills mutants that survived round 46's tests
(helper mutants10, docs/experiments.md)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.context import Context
from service.delivery import Delivery
from service.delivery import keys as keyspace
from service.pipeline import deadline, stages
from tests.service.api_helpers import AppFactory, batch_body

PLANNING = keyspace.step_planning(2)


def _life_left_ms(redis_client: redis.Redis) -> float:
    """Milliseconds until the one planning entry of step 2 lapses, on Redis's clock."""
    [entry] = redis_client.zrange(PLANNING, 0, -1, withscores=True)
    lapses = entry[1]
    seconds, micros = redis_client.time()
    return float(lapses) - (seconds * 1000 + micros // 1000)


def _lives_seen_planning(monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis) -> list[float]:
    """What life each request's entry has left as it starts planning, appended as requests plan."""
    seen: list[float] = []
    original = stages._plans

    def planning(*args: Any, **kwargs: Any) -> Any:
        seen.append(_life_left_ms(redis_client))
        return original(*args, **kwargs)

    monkeypatch.setattr(stages, "_plans", planning)
    return seen


@pytest.mark.parametrize("sent", [None, "10000"], ids=["no-deadline", "10-s-deadline"])
def test_a_planning_entry_lives_the_queue_timeout_the_budget_left_and_the_margin(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, sent: str | None
) -> None:
    """A 60 s budget: the entry lives queue timeout + 60 s + margin with no deadline, and no more
    than queue timeout + 10 s + margin under a 10 s one (the budget the deadline leaves the plan)."""
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    seen = _lives_seen_planning(monkeypatch, redis_client)
    body = batch_body(prompts=4, step=2, time_budget_ms=60_000, policy="round_robin")
    headers = {} if sent is None else {deadline.HEADER: sent}
    assert client.post("/schedule", json=body, headers=headers).status_code == 200
    floor_ms = (ctx.settings.plan_queue_timeout_s + keyspace.PLANNING_MARGIN_S) * 1000
    budget_ms = 60_000 if sent is None else 10_000 - deadline.MIN_RESERVE_S * 1000
    [left_ms] = seen
    assert floor_ms < left_ms <= floor_ms + budget_ms
    if sent is None:
        assert left_ms > floor_ms + 50_000  # the whole budget, less the moments before the plan


def test_a_take_back_redis_fails_is_a_warning_over_the_answer_and_the_entry_lapses(
    client: TestClient,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bookkeeping: the step was published, and its answer is the caller's; the entry left keeps the
    step out until its deadline, never letting it in early."""

    def fails(*_: object) -> None:
        raise redis.ConnectionError("answer lost")

    monkeypatch.setattr(Delivery, "leave_planning", fails)
    body = batch_body(prompts=4, step=2, schedule_id="step-2b")
    assert client.post("/schedule", json=body).status_code == 200
    assert "step's planning entry left to lapse" in caplog.text
    assert redis_client.zcard(PLANNING) == 1


def test_a_planning_entry_of_a_request_naming_no_budget_lives_the_default_budget_too(
    make_client: AppFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget the request plans with is the service's default where it names none (``validate``)."""
    client = make_client(default_time_budget_ms=60_000)
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    seen = _lives_seen_planning(monkeypatch, redis_client)
    body = batch_body(prompts=4, step=2, policy="round_robin")
    body.pop("time_budget_ms", None)
    assert client.post("/schedule", json=body).status_code == 200
    floor_ms = (ctx.settings.plan_queue_timeout_s + keyspace.PLANNING_MARGIN_S) * 1000
    [left_ms] = seen
    assert floor_ms + 50_000 < left_ms <= floor_ms + 60_000  # the default budget, less the moments before
