"""A ``/schedule``'s wait for a fold beside it (``models.FOLD_WAIT_S``) ends at the caller's deadline.

Why: the wait is learning bookkeeping, and once the caller's deadline has passed its 504 is all the
request can answer: a request with 10 ms left waited the whole 50 ms, then was refused (learn51's
report). ``stages.predict`` hands the deadline's time left to the fold's wait (``predictors.cutoff``),
which is cut there and answers the 504 at once. ``FOLD_WAIT_S`` is raised far past the thread's bound
here, so only the deadline can end the wait: nothing here asserts a duration."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from service.api.schemas import ScheduleRequest
from service.context import Context
from service.learning import models as models_module
from service.learning.models import ModelService
from service.pipeline import stages
from service.pipeline.deadline import Deadline
from service.problems.table import DeadlineExceededError
from tests.service.api_helpers import batch_body

BOUND_S = 30.0  # how long a thread is given on a loaded host: a bound, not a speed


@contextmanager
def _fold_beside(models: ModelService) -> Iterator[None]:
    """A fold beside requests under way (the follower's, ``POST /actuals``' or a retrain's, counted
    as each is) for as long as the block runs: it holds the sync lock on its own thread."""
    reached, go_on = threading.Event(), threading.Event()

    def fold() -> None:
        with models._beside.counted(), models._sync_lock:
            reached.set()
            go_on.wait(BOUND_S)

    folding = threading.Thread(target=fold, name="fold-beside", daemon=True)
    folding.start()
    try:
        assert reached.wait(BOUND_S)
        yield
    finally:
        go_on.set()
        folding.join(BOUND_S)


def _predicted_until(client: TestClient, until: Deadline) -> list[BaseException | None]:
    """Run ``stages.predict`` under ``until`` on its own thread beside a fold held open; what it
    raised (None: it answered) if it ended while the fold was held, nothing if it did not."""
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    body = ScheduleRequest.model_validate(batch_body())
    checked = stages.validate(body, ctx)
    ended: list[BaseException | None] = []

    def request() -> None:
        try:
            stages.predict(body, checked, ctx, until)
            ended.append(None)
        except BaseException as error:  # what ended it is the test's answer
            ended.append(error)

    with _fold_beside(ctx.models):
        predicting = threading.Thread(target=request, daemon=True)
        predicting.start()
        predicting.join(BOUND_S)
        return list(ended)


@pytest.fixture(autouse=True)
def _fold_wait_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_module, "FOLD_WAIT_S", 10 * BOUND_S)


def test_a_request_beside_a_fold_is_refused_at_its_deadline_not_after_fold_wait_s(
    client: TestClient,
) -> None:
    ended = _predicted_until(client, Deadline(at=time.perf_counter() + 0.05))
    assert ended, "the request waited for the fold past its deadline"
    assert isinstance(ended[0], DeadlineExceededError)


def test_a_request_whose_deadline_passed_in_line_does_not_wait_for_the_fold(client: TestClient) -> None:
    ended = _predicted_until(client, Deadline(at=time.perf_counter() - 1.0))
    assert ended, "the request waited for the fold though its deadline had passed"
    assert isinstance(ended[0], DeadlineExceededError)
