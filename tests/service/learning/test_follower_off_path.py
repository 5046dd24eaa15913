"""Where the follower runs, a request waits for neither its fold nor a reload (periodic50).

A ``/schedule`` arriving while the follower folded a step's 32,768 actuals from another replica waited
for the fold, ~0.8 s of ~0.8 s (docs/experiments.md); it now waits ``FOLD_WAIT_S`` at most (a
trickle's fold is done by then), then predicts from the history last folded.
The load of another replica's new version ran on a request once a second; the follower's tick runs
it now, and one that does not load keeps the model held, said once. Fakes gate the fold on events:
nothing here asserts a duration."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from predictors.queries import Query
from predictors.store import ModelStore
from service.api.learning_schemas import ActualReport
from service.learning import models as models_module
from service.learning.actuals import ActualsLog
from service.learning.follower import Follower
from service.learning.models import ModelService
from tests.service.api_helpers import actual_history, actual_report

BOUND_S = 30.0  # how long a thread is given on a loaded host: a bound, not a speed
QUERIES = [Query(f"p{p}", 0, 100 + 10 * p, 2048) for p in range(8)]


def _reports(rows: list[dict[str, Any]]) -> list[ActualReport]:
    return [ActualReport.model_validate(r) for r in rows]


def _service(redis_client: redis.Redis, store: Path) -> ModelService:
    return ModelService(ModelStore(store), ActualsLog(redis_client, 10_000))


def test_a_request_during_the_followers_fold_predicts_from_the_last_fold_without_waiting_it_out(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _service(redis_client, tmp_path / "models")
    models.actuals.append(_reports([actual_report(0, p, i) for p in range(8) for i in range(4)]))
    models.sync()
    last_fold = models.predict(QUERIES, 2, 0.5)
    models.actuals.append(_reports([actual_report(1, p, i) for p in range(8) for i in range(4)]))
    reading, go_on = threading.Event(), threading.Event()
    read = models.actuals.rows_after

    def held_read(cursor: str) -> Any:  # the follower's read of a step's actuals, held open
        reading.set()
        assert go_on.wait(BOUND_S)
        return read(cursor)

    monkeypatch.setattr(models.actuals, "rows_after", held_read)
    monkeypatch.setattr(models, "warm_later", lambda step: None)
    follower = threading.Thread(target=models.follow)
    answered: list[Any] = []
    request = threading.Thread(target=lambda: answered.append(models.predict(QUERIES, 2, 0.5)))
    follower.start()
    try:
        assert reading.wait(BOUND_S)
        request.start()
        request.join(BOUND_S)  # the fold is held open all along: only a request not waiting ends
        assert answered, "the request waited for the follower's fold"
    finally:
        go_on.set()
        follower.join(BOUND_S)
        request.join(BOUND_S)
    assert answered[0].p50.tolist() == last_fold.p50.tolist()  # the history last folded: step 0's
    assert models.rows == 64  # the fold went on: the next request reads step 1 too
    assert models.predict(QUERIES, 2, 0.5).p50.tolist() != last_fold.p50.tolist()


def test_a_followed_replicas_request_loads_no_model_its_followers_tick_does(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models_module, "RELOAD_EVERY_S", 0.0)  # a request's reload always due
    serving = _service(redis_client, tmp_path / "models")
    serving.start()
    follower = Follower(serving, every_s=60.0)  # never started: its ticks run here, one at a time
    serving.followed = True  # as ``Follower.start`` says, without the thread
    trainer = _service(redis_client, tmp_path / "models")
    trainer.actuals.append(_reports(actual_history(steps=2)))
    trainer.start()
    assert trainer.retrain().version == 1
    assert serving.predict(QUERIES, 2, 0.5).model_version is None  # the request loaded nothing
    follower.follow_once()
    assert serving.version == "v1"
    assert serving.predict(QUERIES, 2, 0.5).model_version == 1  # the one the tick loaded


def test_a_version_the_followers_tick_cannot_load_keeps_the_model_held_and_is_said_once(
    redis_client: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "models"
    trainer = _service(redis_client, store)
    trainer.actuals.append(_reports(actual_history(steps=2)))
    trainer.start()
    trainer.retrain()
    serving = _service(redis_client, store)
    serving.start()
    ticks = iter([0.0, models_module.RELOAD_EVERY_S])  # each tick a store check (one a second at most)
    follower = Follower(serving, every_s=60.0, clock=lambda: next(ticks))
    damaged = store / "v000002"
    shutil.copytree(store / "v000001", damaged)
    (damaged / "p50.txt").write_text("garbage")
    with caplog.at_level(logging.ERROR, logger="service.models"):
        caplog.clear()
        follower.follow_once()
        follower.follow_once()
    assert serving.version == "v1"
    # the errors the two ticks logged: the records before them (the start's and the retrain's INFO
    # lines, kept where an earlier test in the same worker set the service's loggers to INFO) and any
    # other thread's are not the follower's
    [line] = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.thread == threading.get_ident()
    ]
    assert line.startswith("model store: ")
    assert "v000002" in line
    assert line.endswith("passed over")


def test_starting_a_follower_leaves_the_reload_to_it(redis_client: redis.Redis, tmp_path: Path) -> None:
    serving = _service(redis_client, tmp_path / "models")
    assert not serving.followed  # no follower (``ROLLOUT_ACTUALS_FOLLOW_S=0``): requests reload
    follower = Follower(serving, every_s=60.0).start()
    try:
        assert serving.followed
    finally:
        assert follower.stop()
