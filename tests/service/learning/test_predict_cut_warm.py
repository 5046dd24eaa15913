"""A predict cut at its caller's deadline (``predictors.cutoff``), maybe inside the history's fold,
leaves that fold to the background warm: with it cut on the request path and never finished, every
request of a short deadline on a replica that folds on its path would start it anew (deadline49)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from predictors import cutoff
from predictors.queries import Query
from service.learning.models import ModelService
from tests.service.api_helpers import AppFactory, actual_report


class StoppedWaitingError(Exception):
    """What the test's check raises: the caller stopped waiting."""


def _stop() -> None:
    raise StoppedWaitingError


def _models(client: TestClient) -> ModelService:
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return models


@pytest.fixture
def models(make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[ModelService, list[int]]:
    """A replica's models holding step 0's actuals, folded for no step (its warms only recorded)."""
    client = make_client(actuals_follow_s=0)  # its follower may fold first, and ask the warm too
    held = _models(client)
    asked: list[int] = []
    monkeypatch.setattr(held, "warm_later", asked.append)
    reports = [actual_report(0, p, i) for p in range(8) for i in range(4)]
    assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    assert asked == [1]
    asked.clear()
    return held, asked


QUERIES = [Query("p0", 0, 10, 100)]


def test_a_predict_cut_at_its_callers_deadline_is_warmed_off_the_request_path(
    models: tuple[ModelService, list[int]],
) -> None:
    held, asked = models
    with cutoff.checking(_stop), pytest.raises(StoppedWaitingError):
        held.predict(QUERIES, 1, 0.5)  # step 1's fold is nowhere cached: it is cut at its first check
    assert asked == [1]
    assert held.predictor.predict(QUERIES, 1, 0.5).p50.tolist()  # the history was left whole


def test_a_predict_that_fails_without_a_callers_check_warms_nothing(
    models: tuple[ModelService, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    held, asked = models

    def broken(*args: object) -> object:
        raise RuntimeError("the model failed")

    monkeypatch.setattr(held.predictor, "predict", broken)
    with pytest.raises(RuntimeError):
        held.predict(QUERIES, 1, 0.5)
    assert asked == []
