"""Where ``POST /schedule``'s stages meet the caller's deadline (``stages._serve_valid``): a request
whose deadline passed while it waited in line is refused before it predicts anything, and the plan's
budget leaves the measured handover to the publish as well as the publish itself
(``publish_pace.Reserve.cap_s``). The paces are injected: no assertion reads how fast anything ran.
Kills mutants that survived round 46's tests (helper mutants10, docs/experiments.md)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.context import Context
from service.pipeline import deadline, stages
from service.pipeline.publish_pace import FIXED_S, HEADROOM
from tests.service.api_helpers import batch_body

HEADER = deadline.HEADER


def _context(client: TestClient) -> Context:
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    return ctx


def test_a_request_whose_deadline_passed_in_line_is_refused_before_its_predictions(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot free when it arrives is taken whatever the time (``PlanSlots.hold``); the deadline's
    check then refuses it, before the predictions read Redis and spend the CPU of a plan nobody reads."""
    predicted: list[int] = []
    predict = stages.predict

    def counted(*args: Any, **kwargs: Any) -> Any:
        predicted.append(1)
        return predict(*args, **kwargs)

    monkeypatch.setattr(stages, "predict", counted)
    late = client.post("/schedule", json=batch_body(), headers={HEADER: "0"})
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    assert "passed before it was predicted" in late.json()["detail"]
    assert predicted == []


def test_the_plan_s_budget_leaves_the_measured_handover_before_the_publish(client: TestClient) -> None:
    """Handovers measured at 2 s per 256 trajectories, publishes at none: a 32-trajectory step (paced
    as 256) under a 10 s deadline plans at most 10 - 1.5 x 2 - 0.02 s, the handover's 3 s left
    between its plan's end and its publish."""
    pace = _context(client).publish_pace
    pace.handover.record(2.0, 256)
    pace.publish.record(0.0, 256)
    body = batch_body(time_budget_ms=60_000, policy="round_robin")
    answer = client.post("/schedule", json=body, headers={HEADER: "10000"})
    assert answer.status_code == 200
    assert 0 < answer.json()["time_budget_ms"] <= (10.0 - HEADROOM * 2.0 - FIXED_S) * 1000
