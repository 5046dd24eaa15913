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


def _scored_rows(monkeypatch: pytest.MonkeyPatch, model: FittedModel) -> list[int]:
    """The rows each call of the p50 booster scores, in order."""
    rows: list[int] = []
    booster, original = model.p50, model.p50.predict

    def counted(features: Any, **kwargs: Any) -> Any:
        rows.append(len(features))
        return original(features, **kwargs)

    monkeypatch.setattr(booster, "predict", counted)
    return rows


def test_a_caller_that_stops_waiting_cuts_the_model_at_its_next_chunk(
    monkeypatch: pytest.MonkeyPatch, fitted: tuple[LengthPredictor, FittedModel, QueryBatch]
) -> None:
    predictor, model, batch = fitted
    monkeypatch.setattr(cutoff, "CHUNK_ROWS", CHUNK)
    scored = _scored_rows(monkeypatch, model)
    checks: list[int] = []

    def after_the_first_chunk() -> None:
        checks.append(1)
        if len(checks) > 1:
            raise StoppedWaitingError

    with cutoff.checking(after_the_first_chunk), pytest.raises(StoppedWaitingError):
        predictor.predict(batch, step=3)
    assert scored == [CHUNK]  # one chunk scored, the rest never asked of the booster


def test_scores_in_chunks_are_the_scores_of_one_call(
    monkeypatch: pytest.MonkeyPatch, fitted: tuple[LengthPredictor, FittedModel, QueryBatch]
) -> None:
    predictor, model, batch = fitted
    whole = predictor.predict(batch, step=3)
    monkeypatch.setattr(cutoff, "CHUNK_ROWS", CHUNK)
    scored = _scored_rows(monkeypatch, model)
    with cutoff.checking(lambda: None):
        chunked = predictor.predict(batch, step=3)
    assert len(scored) > 1
    assert np.array_equal(chunked.p50, whole.p50)
    assert np.array_equal(chunked.p90, whole.p90)
    assert np.array_equal(chunked.value, whole.value)


def test_without_a_check_set_the_model_scores_every_chunk(
    monkeypatch: pytest.MonkeyPatch, fitted: tuple[LengthPredictor, FittedModel, QueryBatch]
) -> None:
    predictor, model, batch = fitted
    monkeypatch.setattr(cutoff, "CHUNK_ROWS", CHUNK)
    scored = _scored_rows(monkeypatch, model)
    predictor.predict(batch, step=3)
    assert (sum(scored), max(scored)) == (60, CHUNK)
