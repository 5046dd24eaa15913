"""The model scores its rows in chunks, running its caller's check between them (``predictors.cutoff``):
a caller that has stopped waiting cuts the call at the next chunk, and the scores are those of one call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from predictors import cutoff
from predictors.history import History
from predictors.model import FittedModel, fit
from predictors.predictor import LengthPredictor
from predictors.queries import NO_CAP, QueryBatch
from tests.predictors.helpers import FAST, drifting_trace

CHUNK = 7  # rows a chunk in these tests: the step's 60 distinct prompts are 9 chunks


class StoppedWaitingError(Exception):
    """What the test's check raises: the caller stopped waiting."""


@pytest.fixture(scope="module")
def fitted() -> tuple[LengthPredictor, FittedModel, QueryBatch]:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 3))
    model = fit(history, FAST)
    return LengthPredictor(history, model), model, QueryBatch.from_trace(trace.take(trace.step == 3), NO_CAP)


def _scored_rows(monkeypatch: pytest.MonkeyPatch, booster: Any) -> list[int]:
    """The rows each call of ``booster`` (one of the model's two) scores, in order."""
    rows: list[int] = []
    original = booster.predict

    def counted(features: Any, **kwargs: Any) -> Any:
        rows.append(len(features))
        return original(features, **kwargs)

    monkeypatch.setattr(booster, "predict", counted)
    return rows


@pytest.mark.parametrize(
    ("checks_passed", "p90_scored"),
    [(2, [CHUNK]), (1, [])],
    ids=["after-the-first-chunk", "after-the-p50-call"],
)
def test_a_caller_that_stops_waiting_cuts_the_model_at_its_next_booster_call(
    monkeypatch: pytest.MonkeyPatch,
    fitted: tuple[LengthPredictor, FittedModel, QueryBatch],
    checks_passed: int,
    p90_scored: list[int],
) -> None:
    """The check runs before each booster call, not only each chunk: a caller that stops waiting after
    the first chunk (both boosters) or after the p50 call alone leaves every later call unasked."""
    predictor, model, batch = fitted
    predictor.warm(3)  # the history's fold, which checks too (deadline49), done: these checks are the model's
    monkeypatch.setattr(cutoff, "CHUNK_ROWS", CHUNK)
    p50, p90 = _scored_rows(monkeypatch, model.p50), _scored_rows(monkeypatch, model.p90)
    checks: list[int] = []

    def stops_waiting() -> None:
        checks.append(1)
        if len(checks) > checks_passed:
            raise StoppedWaitingError

    with cutoff.checking(stops_waiting), pytest.raises(StoppedWaitingError):
        predictor.predict(batch, step=3)
    assert (p50, p90) == ([CHUNK], p90_scored)


def test_scores_in_chunks_are_the_scores_of_one_call(
    monkeypatch: pytest.MonkeyPatch, fitted: tuple[LengthPredictor, FittedModel, QueryBatch]
) -> None:
    predictor, model, batch = fitted
    whole = predictor.predict(batch, step=3)
    monkeypatch.setattr(cutoff, "CHUNK_ROWS", CHUNK)
    scored = _scored_rows(monkeypatch, model.p50)
    with cutoff.checking(lambda: None):
        chunked = predictor.predict(batch, step=3)
    assert len(scored) > 1
    assert np.array_equal(chunked.p50, whole.p50)
    assert np.array_equal(chunked.p90, whole.p90)
    assert np.array_equal(chunked.value, whole.value)


@pytest.mark.parametrize("check", [None, lambda: None], ids=["unchecked", "checked"])
def test_no_rows_are_scored_as_none_with_or_without_a_check(
    fitted: tuple[LengthPredictor, FittedModel, QueryBatch], check: Any
) -> None:
    """Nothing to score is no chunk, not a chunk of no rows: an empty answer, no error."""
    _, model, _ = fitted
    features = np.empty((0, model.p50.num_feature()), dtype=np.float64)
    with cutoff.checking(check):
        p50, p90 = model.predict(features, np.empty(0, dtype=np.float64))
    assert len(p50) == len(p90) == 0
