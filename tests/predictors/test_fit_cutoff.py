"""A fit under its caller's check (``predictors.cutoff``) runs it after every boosting round, so a
caller that has stopped waiting (the service's retrain, at its replica's stop) cuts the fit within
one round rather than waiting out every round of every booster; one whose check passes gets the
model a fit without a check gives, score for score."""

from __future__ import annotations

import numpy as np
import pytest

from predictors import cutoff
from predictors.history import History
from predictors.model import fit
from predictors.predictor import LengthPredictor
from predictors.queries import NO_CAP, QueryBatch
from tests.predictors.helpers import FAST, drifting_trace


class StoppedError(Exception):
    """What the test's check raises: the caller has stopped waiting."""


def _history() -> tuple[History, QueryBatch]:
    trace = drifting_trace()
    return History(trace.take(trace.step < 3)), QueryBatch.from_trace(trace.take(trace.step == 3), NO_CAP)


def test_a_fit_whose_caller_stops_waiting_is_cut_at_its_next_boosting_round() -> None:
    history, _ = _history()
    checks: list[int] = []

    def stop_after_three() -> None:
        checks.append(1)
        if len(checks) > 3:
            raise StoppedError

    with cutoff.checking(stop_after_three), pytest.raises(StoppedError):
        fit(history, FAST)
    assert len(checks) == 4  # the fourth check raised: nothing ran past it
    assert FAST.num_rounds > 4  # so the fit was cut short, inside its first booster


def test_a_check_that_passes_runs_once_a_round_and_changes_no_score() -> None:
    history, queries = _history()
    checks: list[int] = []
    with cutoff.checking(lambda: checks.append(1)):
        checked = fit(history, FAST)
    unchecked = fit(history, FAST)
    assert len(checks) >= 2 * FAST.num_rounds  # both boosters' rounds, and the calibration's booster's
    assert checked.metadata.p90_shift == unchecked.metadata.p90_shift  # the calibration's booster too
    got = LengthPredictor(history, checked).predict(queries, step=3)
    expected = LengthPredictor(history, unchecked).predict(queries, step=3)
    np.testing.assert_array_equal(got.p50, expected.p50)
    np.testing.assert_array_equal(got.p90, expected.p90)
