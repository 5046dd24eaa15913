"""A prompt partly cut at a cap since raised: more than a tenth of its samples ran past the old cut,
so its p90 is at least that cut (``predictors.censored``), while its median is left to the lengths."""

from __future__ import annotations

import numpy as np
import pytest

from predictors.censored import raise_censored
from predictors.history import History
from predictors.model import fit
from predictors.predictor import LengthPredictor
from predictors.queries import NO_CAP, Query
from scheduler.trace import TraceRow
from tests.predictors.helpers import FAST


def _partly_cut(cut: int, cap: int = 1000) -> History:
    """30 prompts x 8 samples x 3 steps; in each step ``cut`` samples of every prompt are cut at
    ``cap``, the others finish at 500-600 tokens."""
    rows = [
        TraceRow(
            step, f"p{j}", i, 50, cap if i < cut else 500 + 10 * i + j, cap, "length" if i < cut else "stop"
        )
        for step in range(3)
        for j in range(30)
        for i in range(8)
    ]
    return History(rows)


@pytest.mark.parametrize("with_model", [True, False])
@pytest.mark.parametrize("cut", [1, 2])
def test_a_prompt_partly_cut_at_a_cap_since_raised_has_a_p90_at_least_the_old_cut(
    with_model: bool, cut: int
) -> None:
    """One or two of 8 samples cut at 1,000 ran past it, so 90% of the next run's do not all stay
    under it; the p90 was read from lengths the cut ones only bound (784-962 without a model)."""
    history = _partly_cut(cut)
    predictor = LengthPredictor(history, fit(history, FAST) if with_model else None)
    out = predictor.predict([Query(f"p{j}", 0, 50, 8000) for j in range(30)], step=3, quantile=0.9)
    assert np.all(out.p90 >= 1000.0)
    assert np.all(out.p90 < 8000.0)  # not lifted to the new cap: most samples finished below the cut
    assert np.all(out.p50 < 1000.0)


def test_the_p90_is_held_at_the_cut_from_a_tenth_cut_and_lifted_to_the_cap_from_half() -> None:
    p50, p90 = np.full(5, 400.0), np.full(5, 600.0)
    caps = np.array([8000, 8000, 8000, 1000, NO_CAP])
    share = np.array([0.09, 0.1, 0.5, 0.5, 0.5])
    got50, got90 = raise_censored(p50, p90, caps, share, np.full(5, 1000.0), np.full(5, 1000.0))
    assert got50.tolist() == [400.0, 400.0, 1000.0, 400.0, 400.0]
    assert got90.tolist() == [600.0, 1000.0, 8000.0, 600.0, 600.0]
