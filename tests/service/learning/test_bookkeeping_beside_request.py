"""The learning's bookkeeping holds no request: a retrain's sync, and ``GET /models``' on a followed
replica, are waited for ``FOLD_WAIT_S`` at most, and a retrain's snapshot of the history is joined
outside the locks a request takes (learn51).

The automatic retrain (``ROLLOUT_RETRAIN_EVERY_STEPS``) starts on a ``/schedule`` of a step boundary
and runs beside the next requests. It synced, then joined the whole history into one trace, both under
the sync lock, the join under the history's own lock too: at 1.2 M rows the join took 0.1-0.6 s (load
10-14) and a request's sync started beside it waited all of it (docs/experiments.md, learn51), past a
plan's 80 ms budget, on a followed replica or not. ``GET /models`` syncs before it says what serves:
a step's actuals not yet taken by the follower held a request beside it as ``POST /actuals``' fold had
(review50b). Fakes hold the sync's read and the join open on
events: nothing here asserts a duration."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from predictors.queries import Query
from predictors.store import ModelStore
from predictors.tracetable import Trace
from service.api.learning_schemas import ActualReport
from service.learning import models as models_module
from service.learning.actuals import ActualsLog
from service.learning.models import ModelService
from tests.service.api_helpers import actual_report

BOUND_S = 30.0  # how long a thread is given on a loaded host: a bound, not a speed
QUERIES = [Query(f"p{p}", 0, 100 + 10 * p, 2048) for p in range(8)]
RETRAINER = "retrainer"  # the retrain's (or status route's) thread: only its read or join is held


def _service(redis_client: redis.Redis, store: Path, followed: bool) -> ModelService:
    """Two steps stored and folded, in two chunks of the history (two syncs); nothing fitted."""
    models = ModelService(ModelStore(store), ActualsLog(redis_client, 10_000))
    for step in (0, 1):
        rows = [actual_report(step, p, i) for p in range(8) for i in range(4)]
        models.actuals.append([ActualReport.model_validate(r) for r in rows])
        models.sync()
    models.followed = followed
    return models


def _ends_while_held(
    models: ModelService,
    reached: threading.Event,
    go_on: threading.Event,
    work: Callable[[], None] | None = None,
) -> bool:
    """Start ``work`` (a retrain, its fit stubbed) on its own thread; once it reached what is held,
    whether a predict started then ends before the hold is let go."""
    answered: list[Any] = []
    target = work or (lambda: _retrained(models))
    retrain = threading.Thread(target=target, name=RETRAINER, daemon=True)
    request = threading.Thread(target=lambda: answered.append(models.predict(QUERIES, 2, 0.5)))
    retrain.start()
    try:
        assert reached.wait(BOUND_S)
        request.start()
        request.join(BOUND_S)
        return bool(answered)
    finally:
        go_on.set()
        request.join(BOUND_S)
        retrain.join(BOUND_S)


def _held_on_the_retrainer(real: Callable[..., Any], reached: threading.Event, go_on: threading.Event) -> Any:
    def held(*args: Any) -> Any:
        if threading.current_thread().name == RETRAINER:
            reached.set()
            assert go_on.wait(BOUND_S)
        return real(*args)

    return held


class _UnfittedError(Exception):
    """What the stubbed fit raises: the retrain's bookkeeping before it is what is tested."""


def _unfitted(history: Trace) -> None:
    raise _UnfittedError


def _retrained(models: ModelService) -> None:
    with pytest.raises(_UnfittedError):
        models.retrain()


def test_a_followed_replicas_request_beside_the_retrains_sync_waits_for_it_fold_wait_s_at_most(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _service(redis_client, tmp_path / "models", followed=True)
    reached, go_on = threading.Event(), threading.Event()
    monkeypatch.setattr(
        models.actuals, "rows_after", _held_on_the_retrainer(models.actuals.rows_after, reached, go_on)
    )
    monkeypatch.setattr(models_module, "fit", _unfitted)
    assert _ends_while_held(models, reached, go_on), "the request waited out the retrain's sync"


@pytest.mark.parametrize("followed", [True, False])
def test_a_request_beside_the_retrains_snapshot_does_not_wait_for_its_join(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, followed: bool
) -> None:
    models = _service(redis_client, tmp_path / "models", followed)
    assert len(models.predictor.history._chunks) > 1  # the snapshot joins them
    reached, go_on = threading.Event(), threading.Event()
    concat: Callable[[Sequence[Trace]], Trace] = Trace.concat
    monkeypatch.setattr(Trace, "concat", staticmethod(_held_on_the_retrainer(concat, reached, go_on)))
    monkeypatch.setattr(models_module, "fit", _unfitted)
    assert _ends_while_held(models, reached, go_on), "the request waited out the retrain's join"


def test_a_followed_replicas_request_beside_get_models_sync_waits_for_it_fold_wait_s_at_most(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _service(redis_client, tmp_path / "models", followed=True)
    step_2 = [actual_report(2, p, i) for p in range(8) for i in range(4)]  # not folded by the follower yet
    models.actuals.append([ActualReport.model_validate(r) for r in step_2])
    reached, go_on = threading.Event(), threading.Event()
    held = _held_on_the_retrainer(models.actuals.rows_after, reached, go_on)
    monkeypatch.setattr(models.actuals, "rows_after", held)
    assert _ends_while_held(models, reached, go_on, models.refresh), (
        "the request waited out GET /models' sync"
    )


def test_an_unfollowed_replicas_request_beside_the_retrains_sync_waits_it_out_and_predicts_with_its_rows(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no follower (``ROLLOUT_ACTUALS_FOLLOW_S=0``) a request folds what is new itself: the
    retrain's sync is that fold done for it, and passing it by predicted without the last step's
    reports (review51a). ``FOLD_WAIT_S`` 0: a request that gives up does so at once."""
    models = _service(redis_client, tmp_path / "models", followed=False)
    step_2 = [actual_report(2, p, i) for p in range(8) for i in range(4)]  # stored on another replica
    models.actuals.append([ActualReport.model_validate(r) for r in step_2])
    reached, go_on = threading.Event(), threading.Event()
    monkeypatch.setattr(
        models.actuals, "rows_after", _held_on_the_retrainer(models.actuals.rows_after, reached, go_on)
    )
    monkeypatch.setattr(models_module, "fit", _unfitted)
    monkeypatch.setattr(models_module, "FOLD_WAIT_S", 0.0)
    rows_read: list[int] = []
    predict = models.predictor.predict

    def counted(*args: Any) -> Any:
        rows_read.append(models.rows)  # the history the request predicts from
        return predict(*args)

    monkeypatch.setattr(models.predictor, "predict", counted)
    retrain = threading.Thread(target=lambda: _retrained(models), name=RETRAINER, daemon=True)
    request = threading.Thread(target=lambda: models.predict(QUERIES, 3, 0.5), daemon=True)
    retrain.start()
    assert reached.wait(BOUND_S)
    request.start()
    request.join(1.0)  # a request that gives up has predicted by now, on any host but a stalled one
    go_on.set()
    request.join(BOUND_S)
    retrain.join(BOUND_S)
    assert rows_read == [3 * 32], "the request predicted without the last step's reports"
