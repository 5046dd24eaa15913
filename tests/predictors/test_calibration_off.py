"""``FitConfig.calibration_folds`` below 2 turns the p90's conformal shift off altogether, the split
in time of a many-step history included: one fold has nothing to hold out beside it, and the
replay's median-only fits (``calibration_folds=0``) skip the calibration's extra boosters."""

from __future__ import annotations

import dataclasses

import pytest

from predictors.model import fit
from tests.predictors.helpers import FAST, drifting_trace


@pytest.mark.parametrize("folds", [0, 1])
def test_fewer_than_two_folds_fit_no_p90_shift(folds: int) -> None:
    model = fit(
        drifting_trace(prompts=40, samples=4, steps=3), dataclasses.replace(FAST, calibration_folds=folds)
    )
    assert model.metadata.p90_shift == 0.0
