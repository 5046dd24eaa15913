"""The history's fold before the model runs its caller's check between its passes and its steps
(``predictors.cutoff``): a caller that has stopped waiting cuts the fold there, and a cut fold leaves
the history as it was, so the next fold gives the stats an uncut one gives (deadline49)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from predictors import cutoff, promptstats
from predictors.history import History
from predictors.promptstats import PromptStats, stats_of
from tests.predictors.helpers import drifting_trace
from tests.scheduler.fake_clock import count_calls


class StoppedWaitingError(Exception):
    """What the test's check raises: the caller stopped waiting."""


def _stop() -> None:
    raise StoppedWaitingError


def _same(a: PromptStats, b: PromptStats) -> bool:
    return all(
        np.array_equal(getattr(a, f.name), getattr(b, f.name), equal_nan=True)
        if isinstance(getattr(a, f.name), np.ndarray)
        else getattr(a, f.name) == getattr(b, f.name)
        for f in dataclasses.fields(a)
    )


def test_a_full_fold_stops_before_folding_a_step_and_leaves_the_history_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = drifting_trace()
    history = History(trace)
    before = int(trace.step.max()) + 1
    folded = count_calls(monkeypatch, promptstats._Fold, "advance")
    with cutoff.checking(_stop), pytest.raises(StoppedWaitingError):
        history.stats_before(before)  # nothing cached: the whole history is folded
    assert folded == []
    assert _same(history.stats_before(before), stats_of(trace, before))


def test_a_resumed_fold_stops_between_the_steps_it_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = drifting_trace()
    last = int(trace.step.max())
    history = History(trace.take(trace.step < last))
    history.stats_before(last)  # cached: the steps after it are folded onto these
    rows = trace.take(trace.step == last)
    history.append(rows)
    history.append(replace(rows, step=np.full(len(rows), last + 1)))
    folded = count_calls(monkeypatch, promptstats._Fold, "advance")

    def stop_once_a_step_is_folded() -> None:
        if folded:
            raise StoppedWaitingError

    with cutoff.checking(stop_once_a_step_is_folded), pytest.raises(StoppedWaitingError):
        history.stats_before(last + 2)
    assert len(folded) == 1  # of the two steps
    assert _same(history.stats_before(last + 2), stats_of(history.trace, last + 2))
