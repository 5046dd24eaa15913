"""The drift is projected past the longest gap the model was fitted on, which the model keeps: a
history capped by ``ROLLOUT_ACTUALS_MAXLEN`` may no longer hold the long gaps the model learned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import predictors.predictor as predictor_module
from predictors.features import base_length
from predictors.history import History
from predictors.model import FittedModel, fit
from predictors.predictor import LengthPredictor, Predictions
from predictors.promptprior import PriorRows
from predictors.queries import NO_CAP, QueryBatch
from predictors.store import ModelStore
from predictors.synthetic import rotating
from predictors.tracetable import Trace
from tests.predictors.helpers import FAST, drifting_trace


@pytest.fixture(scope="module")
def rotated() -> tuple[Trace, FittedModel]:
    """240 prompts each run every 4th step (steps 0-7, +5%/step), and a model fitted on all of it."""
    trace = rotating(drifting_trace(prompts=240, samples=8, steps=8, drift=0.05, seed=1), 4)
    return trace, fit(trace, FAST)


def _unprojected(prior: PriorRows, *_: Any) -> tuple[np.ndarray, np.ndarray]:
    return base_length(prior), np.zeros(len(prior.count))


def _both(
    predictor: LengthPredictor, queries: QueryBatch, step: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Predictions, Predictions]:
    """Predictions at ``step``, as served and with no drift projected at all."""
    served = predictor.predict(queries, step, 0.9)
    with monkeypatch.context() as patched:
        patched.setattr(predictor_module, "projected", _unprojected)
        return served, predictor.predict(queries, step, 0.9)


def test_a_fit_keeps_the_longest_gap_its_examples_came_back_after(rotated: tuple[Trace, FittedModel]) -> None:
    trace, model = rotated
    assert model.metadata.longest_gap == 4
    assert fit(trace.take(trace.step == 0), FAST).metadata.longest_gap == 0  # sibling priors only


def test_a_capped_history_that_lost_the_fitted_gaps_does_not_project_over_them(
    rotated: tuple[Trace, FittedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capped history holds steps 5-7 only: no prompt came back within them, so read from it the
    longest gap seen was 0 and a gap of 4, which the model was fitted on, was projected (+~5%)."""
    trace, model = rotated
    capped = History(trace, max_rows=int((trace.step >= 5).sum()))
    assert int(capped.stats_before(8).step_longest_gap.max()) == 0
    queries = QueryBatch.from_trace(trace.take(trace.step == 5), NO_CAP)  # back at step 9: gap 4
    served, unprojected = _both(LengthPredictor(capped, model), queries, 9, monkeypatch)
    assert set(served.source) == {"lightgbm"}
    np.testing.assert_array_equal(served.p50, unprojected.p50)
    np.testing.assert_array_equal(served.p90, unprojected.p90)
    later, unprojected_later = _both(LengthPredictor(capped, model), queries, 11, monkeypatch)  # gap 6
    assert np.all(later.p50 > unprojected_later.p50)  # the 2 steps past the fitted 4 are projected


def test_a_model_saved_before_it_kept_its_longest_gap_reads_the_historys(
    rotated: tuple[Trace, FittedModel], tmp_path: Path
) -> None:
    trace, model = rotated
    store = ModelStore(tmp_path)
    store.save(model)
    meta = store.path(1) / "metadata.json"
    raw = json.loads(meta.read_text())
    del raw["longest_gap"]
    meta.write_text(json.dumps(raw))
    older = store.load(1)[1]
    assert older.metadata.longest_gap is None
    queries = QueryBatch.from_trace(trace.take(trace.step == 5), NO_CAP)
    for step in (9, 11):  # the whole history holds the fitted gap of 4: the same answers
        ours = LengthPredictor(History(trace), model).predict(queries, step, 0.9)
        theirs = LengthPredictor(History(trace), older).predict(queries, step, 0.9)
        np.testing.assert_array_equal(ours.p90, theirs.p90)
