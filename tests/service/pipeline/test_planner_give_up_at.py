"""When the planner is told to give up (``Deadline.planner_gives_up``): what the publish of the plan's
size needs before the caller's deadline, on the planner's clock (``time.perf_counter``), whatever clock
the deadline itself is read on; never without a deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.context import Context
from service.pipeline import deadline
from service.pipeline.deadline import NO_DEADLINE, Deadline
from tests.service.api_helpers import batch_body

LEFT_S, NEED_S = 9.0, 0.5  # what the deadline leaves, and what the publish needs


def test_the_planner_gives_up_where_only_the_publishs_need_is_left() -> None:
    before = time.perf_counter()
    with Deadline(LEFT_S, clock=lambda: 0.0).planner_gives_up(NEED_S) as give_up_at:
        after = time.perf_counter()
    assert give_up_at is not None
    assert before + LEFT_S - NEED_S <= give_up_at <= after + LEFT_S - NEED_S


def test_without_a_deadline_the_planner_is_never_told_to_give_up() -> None:
    with NO_DEADLINE.planner_gives_up(NEED_S) as give_up_at:
        assert give_up_at is None


def test_a_request_under_a_deadline_has_its_planner_give_up_where_its_publishs_reserve_is_left(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the stage hands ``planner_gives_up`` is the publish's part of the request's reserve, as
    the publish's own check needs it (not the deadline itself, which leaves the publish nothing)."""
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    trajectories = 8 * 4  # ``batch_body``'s
    told: list[tuple[float, float]] = []  # what the stage gave, what the reserve's publish needs
    original = Deadline.planner_gives_up

    def noted(self: Deadline, need_s: float) -> Any:
        told.append((need_s, ctx.publish_pace.reserve(trajectories).publish_s))
        return original(self, need_s)

    monkeypatch.setattr(Deadline, "planner_gives_up", noted)
    sent = client.post("/schedule", json=batch_body(), headers={deadline.HEADER: "60000"})
    assert sent.status_code == 200
    [(need_s, publish_s)] = told
    assert need_s == publish_s > 0.0
