"""A retrain fits the steps whose actuals are all in: the step being planned, whose first finishers
(the short ones) are all the history holds of it mid-step, is left out until the next is planned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.service.api_helpers import AppFactory, actual_history, actual_report, batch_body
from tests.service.learning.step_two import fitted_steps


def _first_finishers(step: int) -> list[dict[str, Any]]:
    """The shortest half of a step's reports: what has arrived of it mid-step."""
    return [actual_report(step, p, i) for p in range(4) for i in range(4)]


def test_a_retrain_asked_for_mid_step_fits_only_the_steps_before_it(
    client: TestClient, tmp_path: Path
) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/schedule", json=batch_body(step=2, publish=False)).status_code == 200
    client.post("/actuals", json={"actuals": _first_finishers(2)})
    retrained = client.post("/models/retrain").json()
    assert fitted_steps(tmp_path, retrained["version"]) == [0, 1]
    assert retrained["history_rows"] == 64  # the 16 of step 2 are not fitted
    assert client.post("/schedule", json=batch_body(step=3, publish=False)).status_code == 200
    later = client.post("/models/retrain").json()  # step 3 planned: step 2 is complete
    assert fitted_steps(tmp_path, later["version"]) == [0, 1, 2]


def test_a_step_planned_by_another_replica_is_left_out_too(make_client: AppFactory, tmp_path: Path) -> None:
    """This replica planned step 1; another plans step 2 and its first actuals land: the history's
    last step is later than the one planned here, so it may be open too."""
    client = make_client()
    client.post("/actuals", json={"actuals": actual_history(steps=1)})
    assert client.post("/schedule", json=batch_body(step=1, publish=False)).status_code == 200
    client.post("/actuals", json={"actuals": actual_history(steps=2)[32:] + _first_finishers(2)})
    assert fitted_steps(tmp_path, client.post("/models/retrain").json()["version"]) == [0, 1]


def test_a_history_pushed_with_no_step_planned_is_fitted_whole(client: TestClient, tmp_path: Path) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=3)})  # `trace push --retrain`
    assert fitted_steps(tmp_path, client.post("/models/retrain").json()["version"]) == [0, 1, 2]


def test_the_retrain_a_step_s_plan_starts_fits_every_step_before_that_step(
    client: TestClient, tmp_path: Path
) -> None:
    """Started by step 2's first ``POST /schedule``, before its own plan (the step planned here last
    is still 1): steps 0 and 1 are complete, and both are fitted."""
    assert client.post("/schedule", json=batch_body(step=1, publish=False)).status_code == 200
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
    assert fitted_steps(tmp_path, retrainer.retrain_now("step", 2).version) == [0, 1]
