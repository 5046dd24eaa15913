"""Where a follower runs, a request beside ``POST /actuals``'s own fold waits for it ``FOLD_WAIT_S`` at
most, as for the follower's (review50b).

On the replica that stored a batch, ``POST /actuals`` folds it at once, under the sync lock a request's
own sync takes: a step's 32,768 reports in one batch held it 0.45-1.4 s (load 11-14), and a
``/schedule`` beside it waited all of it, past a plan's 80 ms budget. The follower's fold of the same
batch on every other replica was no longer waited out (periodic50). Without a follower
(``ROLLOUT_ACTUALS_FOLLOW_S=0``) a request still waits it out, as before. A fake holds the fold's read
open on an event: nothing here asserts a duration."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from predictors.queries import Query
from service.learning.folds_beside import FoldsBeside
from service.learning.models import ModelService
from tests.service.api_helpers import AppFactory, actual_report

BOUND_S = 30.0  # how long a thread is given on a loaded host: a bound, not a speed
REPORTS = [actual_report(0, p, i) for p in range(8) for i in range(4)]
QUERIES = [Query(f"p{p}", 0, 100 + 10 * p, 2048) for p in range(8)]


def _models(client: TestClient) -> ModelService:
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return models


def _predicted_beside_post(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, held_s: float = BOUND_S
) -> tuple[Any, Any]:
    """A ``POST /actuals`` of ``REPORTS`` whose fold's read is held open until a predict started
    meanwhile ends, or ``held_s`` passes; that predict's answer and the POST's, once both ended."""
    models = _models(client)
    reading, go_on = threading.Event(), threading.Event()
    read = models.actuals.rows_after
    held: list[bool] = []

    def held_read(cursor: str) -> Any:  # the POST's read of its batch, held open; any later one not
        if not held:
            held.append(True)
            reading.set()
            assert go_on.wait(BOUND_S)
        return read(cursor)

    monkeypatch.setattr(models.actuals, "rows_after", held_read)
    posted: list[Any] = []
    answered: list[Any] = []
    poster = threading.Thread(
        target=lambda: posted.append(client.post("/actuals", json={"actuals": REPORTS}))
    )
    request = threading.Thread(target=lambda: answered.append(models.predict(QUERIES, 1, 0.5)))
    poster.start()
    try:
        assert reading.wait(BOUND_S)
        request.start()
        request.join(held_s)
        ended_while_held = bool(answered)
    finally:
        go_on.set()
        poster.join(BOUND_S)
        request.join(BOUND_S)
    return (answered[0] if ended_while_held else None), posted[0]


def test_a_followed_replicas_request_beside_post_actuals_fold_does_not_wait_it_out(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(actuals_follow_s=60.0)  # followed; its next tick a minute off: the POST folds
    last_fold = _models(client).predict(QUERIES, 1, 0.5)  # nothing stored yet
    beside, posted = _predicted_beside_post(client, monkeypatch)  # the fold held open all along
    assert beside is not None, "the request waited for POST /actuals' fold"
    assert beside.p50.tolist() == last_fold.p50.tolist()  # the history last folded
    assert posted.status_code == 200
    assert _models(client).rows == len(REPORTS)  # the fold went on: the next request reads the batch


def test_an_unfollowed_replicas_request_still_waits_for_post_actuals_fold(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(actuals_follow_s=0)  # ``ROLLOUT_ACTUALS_FOLLOW_S=0``: as before
    last_fold = _models(client).predict(QUERIES, 1, 0.5)  # nothing stored yet
    beside, posted = _predicted_beside_post(client, monkeypatch, held_s=1.0)
    assert beside is None, "the request did not wait for POST /actuals' fold"
    assert posted.status_code == 200
    assert _models(client).predict(QUERIES, 1, 0.5).p50.tolist() != last_fold.p50.tolist()


def test_two_folds_under_way_at_once_stay_counted_until_both_end() -> None:
    """The follower's fold and ``POST /actuals``' may run at once: the first to end leaves the other
    counted (a flag the first cleared made a request wait the second out)."""
    beside = FoldsBeside()
    with beside.counted():
        with beside.counted():
            assert beside.any()
        assert beside.any()
    assert not beside.any()
