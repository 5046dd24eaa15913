"""The service on a real 3-master Redis Cluster: plan, publish, progress, actuals, speeds, retrain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.service.api_helpers import actual_history, actual_report, batch_body


@pytest.mark.slow
def test_the_service_runs_unchanged_on_redis_cluster(cluster_app: TestClient) -> None:
    assert cluster_app.get("/readyz").status_code == 200
    plan = cluster_app.post("/schedule", json=batch_body(workers=3))
    assert plan.status_code == 200, plan.text
    progress = cluster_app.get(f"/schedule/{plan.json()['schedule_id']}").json()
    assert progress["total"] == progress["queued"] == 32
    reports = [*actual_history(steps=2), actual_report(2, 0, 0, slowdown=2.0)]
    learned = cluster_app.post("/actuals", json={"actuals": reports}).json()["time_scales"]
    assert set(learned) == {"w0"}
    retried = cluster_app.post("/actuals", json={"actuals": reports}).json()  # one script, one slot
    assert (retried["accepted"], retried["repeated"], retried["stream_length"]) == (0, 65, 65)
    assert cluster_app.post("/models/retrain").json()["version"] == "v1"
    again = cluster_app.post("/schedule", json=batch_body(workers=3, step=3)).json()
    assert again["model_version"] == "v1"
    assert again["time_scale_sources"]["w0"] == "learned"


@pytest.mark.slow
def test_actuals_of_steps_in_many_slots_are_checked_for_a_cancel_on_redis_cluster(
    cluster_app: TestClient,
) -> None:
    """The cancel check reads every named step's keys in one pipeline, across their slots."""
    for sid in ("step-a", "step-b", "step-c"):
        assert cluster_app.post("/schedule", json=batch_body(schedule_id=sid)).status_code == 200
    assert cluster_app.delete("/schedule/step-b").status_code == 200  # nothing of it ran
    reports = [actual_report(0, p, 0) | {"schedule_id": sid} for p, sid in enumerate(("step-a", "step-c"))]
    cut = actual_report(0, 2, 0) | {"schedule_id": "step-b"}
    refused = cluster_app.post("/actuals", json={"actuals": [*reports, cut]})
    assert (refused.status_code, refused.json()["field"]) == (409, "actuals[2].schedule_id"), refused.text
    assert cluster_app.post("/actuals", json={"actuals": reports}).json()["accepted"] == 2


@pytest.mark.slow
def test_a_step_published_in_two_slots_is_fitted_once_each_part_is_reported_on_redis_cluster(
    cluster_app: TestClient, tmp_path: Path
) -> None:
    """A retrain asked for between steps reads each of the step's schedules, in their slots, and the
    active index: fitted once both parts report every trajectory, left out while one has not."""
    assert cluster_app.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    items = batch_body()["batch"]["items"]
    for sid, part in (("step-2a", items[:4]), ("step-2b", items[4:])):
        body = batch_body(step=2, schedule_id=sid) | {"batch": {"items": part}}
        assert cluster_app.post("/schedule", json=body).status_code == 200
    for sid, prompts in (("step-2a", range(4)), ("step-2b", range(4, 8))):
        reports = [actual_report(2, p, i) | {"schedule_id": sid} for p in prompts for i in range(4)]
        assert cluster_app.post("/actuals", json={"actuals": reports}).status_code == 200
        fitted = cluster_app.post("/models/retrain").json()["version"]
        steps = json.loads((tmp_path / f"v{int(fitted[1:]):06d}" / "metadata.json").read_text())["steps"]
        assert steps == ([0, 1] if sid == "step-2a" else [0, 1, 2])
