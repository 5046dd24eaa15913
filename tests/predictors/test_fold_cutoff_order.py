"""Where each of the full fold's checks falls (``predictors.cutoff``, deadline49): the caller's check
stopping at its first, second, third or sixth call stops the fold before it joins the history's
chunks, before it folds them, before it groups their rows, and before the grouping's sums.

Found by mutation testing (mutants13, docs/experiments.md): each of those checks was removable with
every test passing (the next one stopped the fold a pass later)."""

from __future__ import annotations

import pytest

from predictors import cutoff, history, promptstats, stepgroups
from predictors.history import History
from tests.predictors.helpers import drifting_trace
from tests.scheduler.fake_clock import count_calls


class StoppedWaitingError(Exception):
    """What the test's check raises: the caller stopped waiting."""


@pytest.mark.parametrize(
    ("stop_at", "owner", "name"),
    [
        (1, History, "_joined_from"),  # the history's chunks not joined
        (2, history, "stats_of"),  # not folded
        (3, promptstats, "step_groups"),  # the rows not grouped
        (6, stepgroups, "_sums"),  # the groups' sums not taken
    ],
)
def test_a_full_fold_stops_at_its_checks_in_order(
    monkeypatch: pytest.MonkeyPatch, stop_at: int, owner: object, name: str
) -> None:
    trace = drifting_trace()
    fold = History(trace)
    checks: list[int] = []
    ran = count_calls(monkeypatch, owner, name)

    def stop_at_the_nth() -> None:
        checks.append(1)
        if len(checks) == stop_at:
            raise StoppedWaitingError

    with cutoff.checking(stop_at_the_nth), pytest.raises(StoppedWaitingError):
        fold.stats_before(int(trace.step.max()) + 1)  # nothing cached: the whole history is folded
    assert ran == []


def test_a_call_knows_whether_its_caller_set_a_check() -> None:
    assert not cutoff.is_set()
    with cutoff.checking(lambda: None):
        assert cutoff.is_set()
    assert not cutoff.is_set()
