"""A fit holds its feature matrix once: a retrain runs in the serving process, beside the history.

The matrix (examples x features, float64) is what grows with the history; at the 2 M-row default cap
it is 0.27 GiB with three features. The steps' blocks joined at the end held it twice, and it was
still held while the calibration built its own.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import lightgbm  # noqa: F401  (imported here: its import is not the fit's memory)
import pytest

import predictors.model as model_module
from predictors.features import FeatureSpec
from predictors.model import fit
from tests.predictors.helpers import FAST, drifting_trace


def test_a_fit_never_holds_more_than_one_feature_matrix_and_its_working_set() -> None:
    trace = drifting_trace(prompts=2_000, samples=8, steps=8)  # 128,000 rows, every one an example
    matrix = len(trace) * len(FeatureSpec.of(trace).names) * 8
    tracemalloc.start()
    try:
        model = fit(trace, FAST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert model.metadata.examples == len(trace)
    # 1.95 matrices with the fix (the matrix, one step's rows and the fold's sample); 2.81 before
    assert peak < 2.4 * matrix


def test_the_feature_matrix_is_let_go_before_the_calibration_builds_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = drifting_trace(prompts=1_000, samples=8, steps=8)  # 64,000 rows, every one an example
    matrix = len(trace) * len(FeatureSpec.of(trace).names) * 8
    held: list[int] = []
    conformal_shift = model_module._conformal_shift

    def calibration(*args: Any) -> Any:
        held.append(tracemalloc.get_traced_memory()[0])  # what the fit holds as the calibration begins
        return conformal_shift(*args)

    monkeypatch.setattr(model_module, "_conformal_shift", calibration)
    tracemalloc.start()
    try:
        fit(trace, FAST)
    finally:
        tracemalloc.stop()
    assert len(held) == 1
    assert held[0] < matrix / 4  # the boosters and their binned dataset, not the float64 matrix
