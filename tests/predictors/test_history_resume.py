"""``History.stats_before`` resumes the fold from cached stats when new actuals arrive, and the
result is the full fold's (``stats_of``), bit for bit, whatever order the rows came in."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import predictors.history
from predictors.history import History
from predictors.promptstats import PromptStats, stats_of
from scheduler.trace import TraceRow


def _row(step: int, prompt: int, sample: int, length: int, cut: bool, reward: float | None) -> TraceRow:
    return TraceRow(
        step=step,
        prompt_id=f"p{prompt}",
        sample_idx=sample,
        prompt_tokens=10 + prompt,
        output_tokens=length,
        max_new_tokens=64 if cut else None,
        finish_reason="length" if cut else "stop",
        reward=reward,
    )


rows = st.builds(
    _row,
    step=st.integers(0, 5),
    prompt=st.integers(0, 9),
    sample=st.integers(0, 3),
    length=st.integers(0, 64),
    cut=st.booleans(),
    reward=st.none() | st.floats(0, 1),
)
# an append of a few rows (of any steps: late ones included), or a predict of a step
operations = st.lists(st.lists(rows, min_size=1, max_size=6) | st.integers(0, 7), max_size=30)


def assert_identical(got: PromptStats, want: PromptStats) -> None:
    """Every field equal, index order included, floats compared by their bytes."""
    assert got.before == want.before
    assert list(got.index.items()) == list(want.index.items())
    for field in dataclasses.fields(PromptStats):
        mine, theirs = getattr(got, field.name), getattr(want, field.name)
        if isinstance(mine, np.ndarray):
            assert mine.dtype == theirs.dtype, field.name
            assert mine.tobytes() == theirs.tobytes(), field.name


@settings(max_examples=300, deadline=None)
@given(operations, st.none() | st.integers(4, 40))
def test_stats_before_equal_a_full_fold_of_the_rows_held(
    ops: list[list[TraceRow] | int], cap: int | None
) -> None:
    history = History(max_rows=cap)
    for op in ops:
        if isinstance(op, int):
            assert_identical(history.stats_before(op), stats_of(history.trace, op))
        else:
            history.append(op)
    for step in range(8):  # every step at the end, cached or resumed
        assert_identical(history.stats_before(step), stats_of(history.trace, step))


def _step_rows(step: int, prompts: range) -> list[TraceRow]:
    return [_row(step, p, s, 5 * p + s + step, p % 3 == 0, 0.5) for p in prompts for s in range(2)]


def test_the_predict_after_a_steps_actuals_folds_only_that_steps_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's cycle (actuals of step s, then the predict of s + 1) never re-folds the history;
    the new step's new prompts are numbered after the old ones, as the full fold numbers them."""
    history = History(_step_rows(0, range(4)))
    history.stats_before(1)
    monkeypatch.setattr(predictors.history, "stats_of", None)  # a full re-fold would fail
    for step in (1, 2, 3):
        history.append(_step_rows(step, range(step, step + 4)))
        assert_identical(history.stats_before(step + 1), stats_of(history.trace, step + 1))
    assert list(history.stats_before(4).index) == [f"p{p}" for p in range(7)]


def test_a_late_row_of_an_old_step_refolds_the_whole_history() -> None:
    history = History(_step_rows(0, range(3)) + _step_rows(1, range(3)))
    before = history.stats_before(2)
    history.append(_step_rows(0, range(5, 6)))  # step 0 reported late, after step 1's rows
    history.append(_step_rows(2, range(3)))
    after = history.stats_before(3)
    assert after.num_rows == before.num_rows + len(_step_rows(0, range(1))) + len(_step_rows(2, range(3)))
    assert_identical(after, stats_of(history.trace, 3))


def test_a_full_fold_copies_no_extra_column_and_no_row_when_every_row_is_earlier() -> None:
    """A capped history re-folds everything at each append; taking the earlier rows copied every
    column of every row first (~60 ms at 1 M rows), extra features included, which the fold never reads."""
    import tracemalloc

    from tests.predictors.helpers import drifting_trace

    trace = drifting_trace(prompts=2_000, samples=8, steps=4)
    extras = {f"x{i}": np.random.default_rng(i).random(len(trace)) for i in range(64)}
    trace = dataclasses.replace(trace, numeric=extras)
    for before in (3, 4):  # rows of a later step held (some copied), or none
        tracemalloc.start()
        try:
            stats = stats_of(trace, before)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert stats.num_rows == int((trace.step < before).sum())
        assert peak < sum(column.nbytes for column in extras.values()) / 4


def test_a_capped_history_of_ever_new_prompts_forgets_their_ids_and_still_folds_exactly() -> None:
    """The prompt codes kept with the rows name every prompt appended; a capped history forgets
    those no held row has once they outnumber the held ones, renumbering the codes: its folds stay
    the full fold's, bit for bit, and the ids it keeps stay near the prompts it holds."""
    history = History(max_rows=40)
    for step in range(400):
        history.append(_step_rows(step, range(8 * step, 8 * step + 10)))  # 20 rows of 10 new prompts
        if step % 37 == 0:
            assert_identical(history.stats_before(step + 1), stats_of(history.trace, step + 1))
    assert_identical(history.stats_before(400), stats_of(history.trace, 400))
    assert len(history._ids) <= 2 * 20 + 1024 + 10
