"""Two replicas on one model store, one serving while the other retrains: the hot reload's set-up,
which the reload tests and the heap's release on a reload share."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.learning import models
from tests.service.api_helpers import AppFactory, actual_history, batch_body

RELOAD_TEST_S = 0.2  # the store check interval the reload tests run with (production: 1 s)


def retrained_beside_a_serving_replica(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[TestClient, TestClient]:
    """The trainer's replica and another that served the fallback (its store checked) before the
    trainer stored v1; the other's next store check is due within ``RELOAD_TEST_S``."""
    monkeypatch.setattr(models, "RELOAD_EVERY_S", RELOAD_TEST_S)  # the wait, not its length, is tested
    trainer_side, other = make_client(), make_client()
    other.post("/schedule", json=batch_body(publish=False))  # serving the fallback, store checked
    trainer_side.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    return trainer_side, other
