"""A plan given up because its replica stops, as the route answers it (``service/api/stopping.py``):
one 503 and one log line, wherever in the pipeline the planner's check fires.

``test_stopping.py`` states the give-up on a bare stage; here the app plans a real request with its
stop already set, so the first check of the hard deadline gives up (in operation the handler was
cancelled by then and nobody reads the answer, but the line is read). What review48a found:
- the problem handler logs every 5xx it answers (``request failed``): a handler still waiting for
  the 503 had the stop logged twice, the give-up's own line and the handler's;
- a check that fires outside the planner's own give-up (``Deadline.planner_gives_up``), as the
  body's rules do once validation checks the hard deadline (``check_plan_rules`` runs
  ``validate_request`` before the plan, for a retry under a chosen id), went up as a bare
  ``DeadlinePassedError``: a 500, and no give-up line.
What stagename48 found: the 503's refusal asked the body's rules (``convert.broken_rule``), whose own
check of the hard deadline gave up a second time, outside any stage: the line named "planning", not
the planner's stage, after a validation pass nobody reads.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler import giveup
from scheduler.validation import validate_request
from service.api import convert
from service.api.stopping import GIVEN_UP_LOG
from tests.service.api_helpers import batch_body


def _given_up_stages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(record, "stage", "") for record in caplog.records if record.getMessage() == GIVEN_UP_LOG]


def _stopped_plan(client: TestClient, caplog: pytest.LogCaptureFixture, body: dict[str, Any]) -> list[str]:
    """POST ``body`` to an app whose replica is stopping; assert the 503; the lines it logged."""
    client.app.state.stopping.set()  # type: ignore[attr-defined]  # what ``Startup.halt`` sets
    with caplog.at_level(logging.INFO):
        answer = client.post("/schedule", json=body)
    assert (answer.status_code, answer.headers.get("Retry-After")) == (503, "1"), answer.text
    assert "the replica is stopping" in answer.json()["detail"]
    return [record.getMessage() for record in caplog.records]


def _one_give_up_line(lines: list[str]) -> bool:
    return lines.count(GIVEN_UP_LOG) == 1 and not any(line.startswith("request failed") for line in lines)


def test_a_plan_given_up_at_the_stop_is_answered_503_and_logged_once(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert _one_give_up_line(_stopped_plan(client, caplog, batch_body(step=1)))


def test_a_check_before_the_plan_gives_up_at_the_stop_as_the_plan_does(
    client: TestClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body's rules, checked before the plan for a retry under a chosen id, with validation
    checking the hard deadline (deadline48's branch: every 2,048 trajectories)."""

    def checked(request: Any) -> None:
        with giveup.stage("validation"):
            validate_request(request)

    monkeypatch.setattr(convert, "validate_request", checked)
    assert _one_give_up_line(_stopped_plan(client, caplog, batch_body(schedule_id="retried", step=1)))


def test_the_give_up_line_names_the_planners_stage_and_the_rules_are_not_checked_again(
    client: TestClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped before it planned, the plan gives up at the planner's first check, the end of its
    "validation" stage; the refusal (503) is not asked the body's rules on the way out."""
    rules_checked: list[object] = []

    def counted(request: Any) -> None:
        rules_checked.append(request)
        validate_request(request)

    monkeypatch.setattr(convert, "validate_request", counted)
    _stopped_plan(client, caplog, batch_body(step=1))
    assert (_given_up_stages(caplog), rules_checked) == (["validation"], [])
