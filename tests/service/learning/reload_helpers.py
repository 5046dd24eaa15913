"""Two replicas on one model store, one serving while the other retrains: the hot reload's set-up,
which the reload tests and the heap's release on a reload share."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from service.learning import models
from service.learning.models import ModelService
from tests.service.api_helpers import AppFactory, actual_history, batch_body

RELOAD_TEST_S = 0.2  # the store check interval the reload tests run with (production: 1 s)
NOTICED_WITHIN_S = 30.0  # a bound for a loaded host, not a speed: the follower ticks every 0.25 s


def serving_beside_a_trainer(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[TestClient, TestClient]:
    """The trainer's replica, holding two steps of actuals, and another that served the fallback (its
    store checked); nothing retrained yet."""
    monkeypatch.setattr(models, "RELOAD_EVERY_S", RELOAD_TEST_S)  # the wait, not its length, is tested
    trainer_side, other = make_client(), make_client()
    other.post("/schedule", json=batch_body(publish=False))  # serving the fallback, store checked
    trainer_side.post("/actuals", json={"actuals": actual_history(steps=2)})
    return trainer_side, other


def retrained_beside_a_serving_replica(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[TestClient, TestClient]:
    """``serving_beside_a_trainer``, then the trainer stored v1; the other's next store check (its
    follower's next tick) picks it up."""
    trainer_side, other = serving_beside_a_trainer(make_client, monkeypatch)
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    return trainer_side, other


def served(client: TestClient) -> ModelService:
    """The replica's predictor service."""
    service: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return service


def noticed(client: TestClient, version: str) -> None:
    """Return once ``client``'s replica serves ``version``, asking it nothing (its follower's tick)."""
    deadline = time.monotonic() + NOTICED_WITHIN_S
    while served(client).version != version and time.monotonic() < deadline:
        time.sleep(0.02)
    assert served(client).version == version
