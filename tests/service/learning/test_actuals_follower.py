"""A replica folds the actuals another replica took off the request path (``service.learning.follower``):
before, its next ``/schedule`` folded them itself, uncut, 1.2 s for a step's 32,768 (refresh49). What
it folds is what the request would have folded, so predictions do not change."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from predictors.queries import Query
from predictors.store import ModelStore
from service.api.learning_schemas import ActualReport
from service.learning.actuals import ActualsLog
from service.learning.follower import Follower
from service.learning.models import ModelService
from tests.service.api_helpers import AppFactory, actual_report

WITHIN_S = 30.0  # a bound for a loaded host, not a speed: the follower ticks every 0.25 s
REPORTS = [actual_report(0, p, i) for p in range(8) for i in range(4)]
QUERIES = [Query(f"p{p}", 0, 100 + 10 * p, 2048) for p in range(8)]


def _models(client: TestClient) -> ModelService:
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return models


def _until_rows(models: ModelService, rows: int) -> None:
    deadline = time.monotonic() + WITHIN_S
    while models.rows < rows and time.monotonic() < deadline:
        time.sleep(0.05)


def _warms_recorded(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ActualsLog, ModelService, list[int]]:
    """A model service on the actuals stream whose warms of a next step are recorded, not run: the
    stream, the service and the steps it asked to warm (two tests staged it alike)."""
    log = ActualsLog(redis_client, 1000)
    models = ModelService(ModelStore(tmp_path / "models"), log)
    warmed: list[int] = []
    monkeypatch.setattr(models, "warm_later", warmed.append)
    return log, models, warmed


def test_actuals_another_replica_took_are_folded_here_before_any_request(make_client: AppFactory) -> None:
    took, other = make_client(), make_client()
    assert took.post("/actuals", json={"actuals": REPORTS}).status_code == 200
    _until_rows(_models(other), len(REPORTS))
    assert _models(other).rows == len(REPORTS)  # nothing asked ``other`` anything


def test_the_followers_fold_predicts_as_the_requests_own_fold(make_client: AppFactory) -> None:
    took, following, not_following = make_client(), make_client(), make_client(actuals_follow_s=0)
    assert took.post("/actuals", json={"actuals": REPORTS}).status_code == 200
    _until_rows(_models(following), len(REPORTS))
    assert _models(following).rows == len(REPORTS)  # folded before its predict asked
    assert _models(not_following).rows == 0  # off: the request folds on its path, as before
    followed = _models(following).predict(QUERIES, 1, 0.5)
    folded_on_the_path = _models(not_following).predict(QUERIES, 1, 0.5)
    assert followed.p50.tolist() == folded_on_the_path.p50.tolist()
    assert followed.p90.tolist() == folded_on_the_path.p90.tolist()


def test_a_follow_reads_nothing_more_until_the_stream_moves(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, models, warmed = _warms_recorded(redis_client, tmp_path, monkeypatch)
    assert models.follow() == 0  # an empty stream
    log.append([ActualReport.model_validate(r) for r in REPORTS])
    assert models.follow() == len(REPORTS)
    assert warmed == [1]  # the next step's fold, as ``POST /actuals`` asks on the replica that took them
    assert models.follow() == 0
    assert warmed == [1]


def test_a_follow_that_fails_is_said_once_at_its_second_failure_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One failure alone is not said: a stop whose embedded server went first fails one last follow."""
    gone = redis.Redis(  # refused at once: redis-py's default retries only wait ~3 s a follow
        host="127.0.0.1",
        port=1,
        socket_connect_timeout=1.0,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
    )
    follower = Follower(ModelService(ModelStore(tmp_path / "models"), ActualsLog(gone, 1000)), every_s=1.0)
    with caplog.at_level(logging.WARNING, logger="service.models"):
        assert follower.follow_once() == 0
        assert caplog.records == []
        assert follower.follow_once() == 0
        assert follower.follow_once() == 0
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "following the actuals stream failed" in caplog.records[0].message
    assert follower.stop()  # never started: nothing to wait for


def test_a_follow_that_folds_nothing_new_warms_nothing(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream moved by an entry that does not read: nothing folded, no next step to warm (mutants14)."""
    log, models, warmed = _warms_recorded(redis_client, tmp_path, monkeypatch)
    log.append([ActualReport.model_validate(r) for r in REPORTS])
    assert models.follow() == len(REPORTS)
    redis_client.xadd(log.key, {"a": "not a report"})
    assert models.follow() == 0
    assert warmed == [1]  # the first follow's only
