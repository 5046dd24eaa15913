"""After ``/actuals``, a replica folds the next step's history in the background, so that step's
``/schedule`` finds its stats and prior cached instead of folding them on its own path."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from fastapi.testclient import TestClient

import predictors.history
import service.learning.models
from predictors.fallbacks import GlobalPrior
from predictors.promptstats import resume_stats, stats_of
from service.learning.models import ModelService
from tests.service.api_helpers import AppFactory, actual_report, batch_body


@pytest.fixture
def folds(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of the history folds (whole and resumed) and global priors computed from now on."""
    counts: Counter[str] = Counter()

    def counted(name: str, function: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return function(*args, **kwargs)

        return call

    # where ``History.stats_before`` looks them up
    monkeypatch.setattr(predictors.history, "stats_of", counted("stats_of", stats_of))
    monkeypatch.setattr(predictors.history, "resume_stats", counted("resume_stats", resume_stats))
    monkeypatch.setattr(GlobalPrior, "of", counted("prior", GlobalPrior.of))
    return counts


def _models(client: TestClient) -> ModelService:
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return models


def _report_step(client: TestClient, step: int) -> None:
    """POST /actuals of ``step``, then wait for the warm it starts."""
    reports = [actual_report(step, p, i) for p in range(8) for i in range(4)]
    assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    warmer = _models(client).warmer
    assert warmer is not None, "no warm started after /actuals"
    warmer.join(timeout=30)
    assert not warmer.is_alive()


def _predicted(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (item["prompt_id"], item["sample_idx"]): item["predicted_tokens"]
        for queue in answer["assignments"].values()
        for item in queue
    }


def test_the_schedule_after_actuals_folds_nothing_on_its_path(
    make_client: AppFactory, folds: Counter[str]
) -> None:
    client = make_client()
    for step in range(2):
        _report_step(client, step)
    folds.clear()
    answer = client.post("/schedule", json=batch_body(step=2, publish=False))
    assert answer.status_code == 200
    assert answer.json()["prediction_sources"] == {"prompt_history_mean": 32}
    assert folds == Counter(), "the step's /schedule folded history the warm had folded already"


def test_a_warmed_replica_predicts_what_a_cold_one_folds_on_its_first_predict(
    make_client: AppFactory, folds: Counter[str]
) -> None:
    # a replica that did not receive the /actuals learns the rows on its next sync, and folds them
    # on its first predict: the warm changes where the fold runs, never what it yields
    warmed, cold = make_client(), make_client(actuals_follow_s=0)  # cold: no follower folds for it
    for step in range(2):
        _report_step(warmed, step)
    body = batch_body(step=2, publish=False)
    folds.clear()
    cold_answer = cold.post("/schedule", json=body).json()
    assert folds["prior"] == 1
    assert folds["stats_of"] + folds["resume_stats"] >= 1
    assert _predicted(warmed.post("/schedule", json=body).json()) == _predicted(cold_answer)


def test_a_burst_of_batches_is_warmed_once_for_the_latest_step(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the burst lands within it, however slow
    monkeypatch.setattr(service.learning.models, "WARM_AFTER_S", 1.0)
    client = make_client()
    models = _models(client)
    asked: list[int] = []
    monkeypatch.setattr(models, "warm", asked.append)
    for step in range(3):
        reports = [actual_report(step, p, 0) for p in range(8)]
        assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    assert models.warmer is not None
    models.warmer.join(timeout=30)
    assert asked == [3]


def test_a_replica_started_on_a_history_warms_the_step_after_its_newest(
    make_client: AppFactory, folds: Counter[str]
) -> None:
    # its first /schedule folded the whole history on the request's path (refresh49)
    reporter = make_client(actuals_follow_s=0)  # no follower warms behind the count
    for step in range(2):
        _report_step(reporter, step)
    folds.clear()
    started = make_client(actuals_follow_s=0)
    assert folds["prior"] == 1, "the start did not fold the step after its newest"
    folds.clear()
    answer = started.post("/schedule", json=batch_body(step=2, publish=False))
    assert answer.status_code == 200
    assert folds == Counter(), "the first /schedule after the start folded the history on its path"
