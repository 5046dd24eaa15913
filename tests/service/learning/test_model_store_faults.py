"""A model store that cannot be written or listed (a lost or read-only volume): 503 naming the store.

The tests run as root, which a ``chmod`` does not stop, so a store is made unusable the way root
finds it too: the folder it sits in is replaced by a regular file (``NotADirectoryError``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api_helpers import AppFactory, actual_history, batch_body


def _store(tmp_path: Path) -> Path:
    """The store the tests' app uses, one folder below the "volume" they lose."""
    return tmp_path / "volume" / "models"


def _lose_the_volume(tmp_path: Path) -> None:
    """Put a regular file where the store's folder was: no one, root included, lists or writes it.
    (A store unusable from the start is refused at start, by ``Settings``.)"""
    (tmp_path / "volume").mkdir(exist_ok=True)
    (tmp_path / "volume").rename(tmp_path / "volume-away")
    (tmp_path / "volume").write_text("not a folder")


def _get_the_volume_back(tmp_path: Path) -> None:
    (tmp_path / "volume").unlink()
    (tmp_path / "volume-away").rename(tmp_path / "volume")


def _serving_v1_then_store_lost(make_client: AppFactory, tmp_path: Path) -> TestClient:
    """A service that trained and serves v1, whose store's volume is then lost."""
    client = make_client(model_dir=str(_store(tmp_path)))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v1"
    _lose_the_volume(tmp_path)
    return client


def _retrain_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "retrain failed" in r.getMessage()]


def _lines_at_warning_or_above(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every service line at WARNING or above, whichever logger wrote it."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("service.")
    ]


def _names_the_store(problem: dict[str, Any], store: Path) -> bool:
    """Whether ``problem`` is the store's 503, its detail naming the store."""
    return problem["type"].endswith("/model-store-unavailable") and str(store) in problem["detail"]


def test_a_retrain_into_a_store_that_cannot_be_written_is_a_503_naming_the_store(
    make_client: AppFactory,
    tmp_path: Path,
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It was a 500 whose detail said only "an unexpected error occurred"."""
    client = make_client(model_dir=str(_store(tmp_path)))
    _lose_the_volume(tmp_path)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    with caplog.at_level("INFO", logger="service.retrain"):
        answer = client.post("/models/retrain")
    assert answer.status_code == 503, answer.text
    assert _names_the_store(answer.json(), _store(tmp_path))
    [line] = _retrain_failures(caplog)
    assert str(_store(tmp_path)) in line.getMessage()
    assert line.__dict__["trigger"] == "request"
    assert redis_client.get("rs:retrain:lock") is None
    assert client.app.state.context.retrainer.running is False  # type: ignore[attr-defined]


def test_a_failed_on_demand_retrain_is_one_log_line_not_one_from_the_retrain_and_one_from_the_request(
    make_client: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It logged "retrain failed" and then the 503's "request failed", the same reason twice. (The
    follower is off: its tick lists the store too, and says the loss once, ``model store: ... cannot be
    listed``, a line of its own whenever its tick falls in this window.)"""
    client = make_client(model_dir=str(_store(tmp_path)), actuals_follow_s=0)
    _lose_the_volume(tmp_path)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    with caplog.at_level("INFO"):
        assert client.post("/models/retrain").status_code == 503
    [line] = _lines_at_warning_or_above(caplog)
    assert line.startswith("service.retrain: retrain failed")
    assert str(_store(tmp_path)) in line


def test_a_replica_whose_store_is_lost_keeps_serving_its_model_and_retrains_once_it_is_back(
    make_client: AppFactory, tmp_path: Path
) -> None:
    client = _serving_v1_then_store_lost(make_client, tmp_path)
    refused = client.post("/models/retrain")
    assert refused.status_code == 503, refused.text
    assert _names_the_store(refused.json(), _store(tmp_path))
    planned = client.post("/schedule", json=batch_body(step=2, publish=False))
    assert planned.status_code == 200, planned.text
    assert planned.json()["model_version"] == "v1"
    assert client.get("/readyz").status_code == 200
    _get_the_volume_back(tmp_path)
    assert client.post("/models/retrain").json()["version"] == "v2"  # nothing was left held


def test_an_automatic_retrain_into_a_store_that_cannot_be_written_logs_one_retrain_failed_line(
    make_client: AppFactory,
    tmp_path: Path,
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It logged "automatic retrain failed" with a traceback, but nothing saying which store."""
    client = make_client(model_dir=str(_store(tmp_path)), retrain_every_steps=2)
    _lose_the_volume(tmp_path)
    client.post("/schedule", json=batch_body(step=0))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
    with caplog.at_level("INFO", logger="service.retrain"):
        assert client.post("/schedule", json=batch_body(step=2)).status_code == 200
        assert retrainer.background is not None
        retrainer.background.join(60)
    [line] = _retrain_failures(caplog)
    assert str(_store(tmp_path)) in line.getMessage()
    assert line.__dict__["trigger"] == "step"
    assert not line.exc_info  # the reason is the line; a full volume is not a bug
    assert redis_client.get("rs:retrain:lock") is None
    assert client.get("/healthz").status_code == 200


def test_models_status_of_a_store_that_cannot_be_listed_is_a_503_naming_the_store(
    make_client: AppFactory, tmp_path: Path
) -> None:
    """It was a 500 (a store folder the service may not read), or, where the store's path was no
    folder at all, a 200 listing no version, as if the store were merely empty."""
    client = _serving_v1_then_store_lost(make_client, tmp_path)
    status = client.get("/models")
    assert status.status_code == 503, status.text
    assert _names_the_store(status.json(), _store(tmp_path))
    _get_the_volume_back(tmp_path)
    assert client.get("/models").json()["stored_versions"] == ["v1"]


def test_models_status_of_a_store_not_made_yet_lists_no_version(
    make_client: AppFactory, tmp_path: Path
) -> None:
    """A fresh service's store folder appears with its first version: until then it is empty, not lost."""
    client = make_client(model_dir=str(_store(tmp_path)))
    status = client.get("/models")
    assert status.status_code == 200, status.text
    assert status.json()["stored_versions"] == []


def test_a_retrain_whose_version_cannot_be_written_in_a_listable_store_is_a_503_naming_the_store(
    make_client: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the store lists (its fencing tokens are read first) but the booster's write fails,
    as LightGBM reports it (``LightGBMError``, an ``OSError`` from the store). It was a 500."""
    import lightgbm as lgb

    def full_disk(booster: lgb.Booster, path: str, *args: Any, **kwargs: Any) -> None:
        raise lgb.basic.LightGBMError(f"Cannot write binary data to {path}, wrote 65536 of 149269 bytes")

    client = make_client(model_dir=str(_store(tmp_path)))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    with monkeypatch.context() as patched:
        patched.setattr(lgb.Booster, "save_model", full_disk)
        answer = client.post("/models/retrain")
    assert answer.status_code == 503, answer.text
    assert _names_the_store(answer.json(), _store(tmp_path))
    assert "cannot be written" in answer.json()["detail"]
    assert client.post("/models/retrain").json()["version"] == "v1"  # nothing was left held


def test_a_store_lost_once_the_new_version_serves_leaves_the_old_versions_with_a_warning(
    make_client: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The prune comes after the swap: the retrain has stored and serves its version, and the next
    retrain prunes, so a store that cannot be listed then fails nothing."""
    from predictors.predictor import LengthPredictor

    use_model = LengthPredictor.use_model

    def swapped_then_lost(predictor: LengthPredictor, *args: Any, **kwargs: Any) -> None:
        use_model(predictor, *args, **kwargs)
        _lose_the_volume(tmp_path)

    client = make_client(model_dir=str(_store(tmp_path)), actuals_follow_s=0)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    monkeypatch.setattr(LengthPredictor, "use_model", swapped_then_lost)
    with caplog.at_level("INFO"):
        answer = client.post("/models/retrain")
    assert answer.status_code == 200, answer.text
    assert answer.json()["version"] == "v1"
    [line] = _lines_at_warning_or_above(caplog)
    assert line.startswith(f"service.models: model store {_store(tmp_path)}: old versions not pruned"), line
