"""A plan still running when only its publish's reserve is left before the caller's deadline gives up
(``PlanRequest.hard_deadline``, ``scheduler.giveup``): the planner stops in the stage it is in, and the
request is refused 504 ``deadline-exceeded`` with nothing left in Redis, where the plan ran on to a
publish check that refused it anyway, and on a starved host answered its caller late (reserve46: a 504
464 ms past the deadline). The planner's problem stage is held until the moment it was told to give up
has passed (read from its request: a state, not a guess at the host's speed); the app's own clock stands
still (``slow_upload``), so what the deadline leaves when the request plans is the whole of it."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from scheduler import planner
from scheduler.lowerbound import lower_bound
from scheduler.policies.problem import problem_and_bound_columns
from scheduler.types import PlanRequest
from tests.service.api.slow_upload import (
    STEP,
    SlowClient,
    refused_late_leaving_nothing,
)
from tests.service.api_helpers import batch_body


def _held_past_the_give_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Hold the planner's problem stage until its request's ``hard_deadline`` has passed (none: not
    held); the stages the planner reaches, in order."""
    reached: list[str] = []

    def held(request: PlanRequest) -> Any:
        reached.append("problem")
        while request.hard_deadline is not None and time.perf_counter() <= request.hard_deadline:
            time.sleep(0.005)
        return problem_and_bound_columns(request)

    def bound(*args: Any, **kwargs: Any) -> Any:
        reached.append("bound")
        return lower_bound(*args, **kwargs)

    monkeypatch.setattr(planner, "problem_and_bound_columns", held)
    monkeypatch.setattr(planner, "lower_bound", bound)
    return reached


def test_a_plan_still_running_when_only_its_publish_is_left_gives_up_with_a_504_that_leaves_nothing(
    slow_client: SlowClient,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    late_id: tuple[str | None, int],
) -> None:
    client, app = slow_client(0.0)
    reached = _held_past_the_give_up(monkeypatch)
    schedule_id, marked = late_id
    body = batch_body(schedule_id=schedule_id, step=STEP)
    problem = refused_late_leaving_nothing(client, app, redis_client, monkeypatch, body, "300", marked)
    assert "the planner gave up in its problem stage" in problem["detail"]
    assert reached == ["problem"]  # stopped there: no bound, no policy, no publish


def test_a_plan_without_a_deadline_is_never_told_to_give_up(
    slow_client: SlowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No header, no hard deadline: the plan is the one it always was."""
    client, _ = slow_client(0.0)
    told: list[float | None] = []

    def seen(request: PlanRequest) -> Any:
        told.append(request.hard_deadline)
        return problem_and_bound_columns(request)

    monkeypatch.setattr(planner, "problem_and_bound_columns", seen)
    planned = client.post("/schedule", json=batch_body(step=STEP))
    assert planned.status_code == 200
    assert told == [None]
