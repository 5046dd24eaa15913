"""A prediction reads one history throughout, whatever ``use_history`` swaps in while it runs."""

from __future__ import annotations

import numpy as np

from predictors.history import History
from predictors.predictor import LengthPredictor
from predictors.promptstats import PromptStats
from predictors.queries import Query
from scheduler.trace import TraceRow


class _SwappedWhileRead(History):
    """A history that, once read, has the predictor swap another in: a ``use_history`` (the stream
    reloaded from Redis) landing in the middle of a ``predict``."""

    def __init__(self, rows: list[TraceRow], then: History) -> None:
        super().__init__(rows)
        self.predictor: LengthPredictor | None = None
        self.then = then

    def stats_before(self, step: int) -> PromptStats:
        stats = super().stats_before(step)
        if self.predictor is not None:
            self.predictor.use_history(self.then)
            self.predictor = None
        return stats


def test_a_history_swapped_in_mid_predict_is_not_mixed_with_the_one_it_started_with() -> None:
    rows = [
        TraceRow(s, f"p{i}", j, 10 + 10 * i, 300 + 40 * i + j, 4096)
        for s in range(2)
        for i in range(60)
        for j in range(4)
    ]
    queries = [Query("p1", 0, 20, 4096), Query("new", 0, 400, 4096)]
    alone = LengthPredictor(History(rows)).predict(queries, step=2)
    swapped = _SwappedWhileRead(rows, then=History())
    predictor = LengthPredictor(swapped)
    swapped.predictor = predictor
    out = predictor.predict(queries, step=2)
    assert predictor.history is swapped.then  # the swap landed during the call
    assert out.source == alone.source == ("prompt_history_mean", "global_prior")
    # the unseen prompt's prior and the seen one's spread are the first history's, not the empty one's
    assert np.array_equal(out.p50, alone.p50)
    assert np.array_equal(out.p90, alone.p90)
