"""``GET /models`` says when the serving version was fitted on a synthetic trace (rows labelled
``source=synthetic``), whether ``predictor train`` stored it or a retrain fitted it on actuals that
``trace push`` sent from such a trace: its predictions learned the generator's lengths."""

from __future__ import annotations

from pathlib import Path

import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from predictors.synthetic import synthetic_trace
from predictors.tracewrite import write_trace
from tests.service.api_helpers import AppFactory, actual_history


def test_get_models_says_the_serving_version_was_trained_on_a_synthetic_trace(
    cli: typer.Typer, make_client: AppFactory, tmp_path: Path
) -> None:
    write_trace(synthetic_trace("short-cot", prompts=12, samples=2, steps=2, seed=1), tmp_path / "s.csv")
    trained = CliRunner().invoke(
        cli, ["predictor", "train", str(tmp_path / "s.csv"), "--out", str(tmp_path / "m")]
    )
    assert trained.exit_code == 0, trained.stderr
    status = make_client(model_dir=str(tmp_path / "m")).get("/models").json()
    assert (status["version"], status["synthetic"]) == ("v1", True)


def test_a_retrain_on_actuals_labelled_synthetic_is_reported_synthetic(client: TestClient) -> None:
    assert client.get("/models").json()["synthetic"] is False  # no model: the fallbacks serve
    labelled = [{**row, "features": {"source": "synthetic"}} for row in actual_history(steps=2)]
    assert client.post("/actuals", json={"actuals": labelled}).status_code == 200
    assert client.post("/models/retrain").status_code == 200
    assert client.get("/models").json()["synthetic"] is True


def test_a_model_of_recorded_actuals_is_not_reported_synthetic(client: TestClient) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").status_code == 200
    assert client.get("/models").json()["synthetic"] is False
