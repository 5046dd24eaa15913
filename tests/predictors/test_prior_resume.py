"""The first predict after a step's actuals costs only the new rows, and answers exactly what a fresh
predictor folding every row answers: the global prior advanced from the last step's counts
(``GlobalPrior.advanced``), the prompt fold numbering the new rows from the history's own codes
(``recoded``); a row of an earlier step arriving late sends both back to every row."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictors.fallbacks import GlobalPrior
from predictors.history import History
from predictors.predictor import LengthPredictor, Predictions
from predictors.promptstats import stats_of
from predictors.queries import Query
from predictors.stepgroups import factorize, recoded
from scheduler.trace import TraceRow


def _assert_same_prior(got: GlobalPrior, want: GlobalPrior) -> None:
    assert got.rows == want.rows
    for name in ("edges", "p50", "p90", "mean"):
        mine, theirs = getattr(got, name), getattr(want, name)
        assert mine.dtype == theirs.dtype, name
        assert mine.tobytes() == theirs.tobytes(), name


lengths = st.integers(0, 3000) | st.sampled_from([0, 1, 512, 2048])  # ties: prompts sharing a length
pairs = st.lists(st.tuples(lengths, lengths), max_size=400)


def _columns(rows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([p for p, _ in rows], dtype=np.int64), np.array([y for _, y in rows], dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(pairs.filter(bool), pairs)
def test_a_prior_advanced_by_more_rows_is_the_prior_of_all_of_them(
    old: list[tuple[int, int]], new: list[tuple[int, int]]
) -> None:
    advanced = GlobalPrior.of(*_columns(old)).advanced(*_columns(new))
    if advanced is not None:  # None: the bin edges moved, every row is counted again
        _assert_same_prior(advanced, GlobalPrior.of(*_columns(old + new)))


def test_rows_that_keep_the_bin_edges_advance_the_prior_and_rows_that_move_them_do_not() -> None:
    old = [(10 * (i % 40), i) for i in range(4000)]
    same_mix = [(10 * (i % 40), 7 * i) for i in range(400)]  # the same lengths, as many of each
    assert GlobalPrior.of(*_columns(old)).advanced(*_columns(same_mix)) is not None
    long_prompts = [(5000, 1)] * 4000  # half of all rows past every edge
    assert GlobalPrior.of(*_columns(old)).advanced(*_columns(long_prompts)) is None


def test_rows_that_move_the_bin_edges_but_keep_their_number_are_counted_again() -> None:
    """Eight bins before and after, at other prompt lengths: the rows counted before fall into other
    bins, so no prior is advanced from their old bins' counts."""
    old = [(10 * (i % 40), i) for i in range(4000)]
    short_prompts = [(0, 3 * i) for i in range(400)]  # every edge moves down, none is lost
    prior, whole = GlobalPrior.of(*_columns(old)), GlobalPrior.of(*_columns(old + short_prompts))
    assert len(whole.edges) == len(prior.edges) == 7
    assert whole.edges.tolist() != prior.edges.tolist()
    assert prior.advanced(*_columns(short_prompts)) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=60), st.lists(st.integers(0, 30), max_size=20), st.randoms())
def test_recoding_given_codes_numbers_prompts_as_hashing_every_row(
    held: list[int], values: list[int], rnd: Any
) -> None:
    index = {f"p{v}": code for code, v in enumerate(dict.fromkeys(held))}
    names = np.array([f"p{v}" for v in values], dtype=object)
    scramble = list(range(31))
    rnd.shuffle(scramble)  # any codes, equal where the ids are: a history's, renumbered by a pruning
    codes = np.array([scramble[v] for v in values], dtype=np.int64)
    theirs = dict(index)
    mine = recoded(codes, names, index)
    assert mine.tolist() == factorize(names, theirs)[0].tolist()
    assert list(index.items()) == list(theirs.items())


def test_rows_of_an_older_step_after_the_new_steps_rows_fold_the_prompts_in_arrival_order() -> None:
    """A chunk wholly of older steps after one of the steps to fold: the full fold numbers the new
    step's prompt before that chunk's, which a fold resumed from the older steps cannot."""
    history = History([TraceRow(0, "a", 0, 10, 5)])
    history.stats_before(1)
    history.append([TraceRow(2, "new", 0, 10, 7)])
    history.append([TraceRow(1, "late", 0, 10, 9)])  # arrived before the fold of step 2 was cached
    history.stats_before(2)  # resumed from step 1's: the chunks stay apart
    got, want = history.stats_before(3), stats_of(history.trace, 3)
    assert list(got.index.items()) == list(want.index.items()) == [("a", 0), ("new", 1), ("late", 2)]
    assert got.total.tolist() == want.total.tolist()


def _row(step: int, prompt: int, sample: int, length: int) -> TraceRow:
    return TraceRow(step, f"p{prompt}", sample, 10 * prompt + 7, length, 4096)


rows = st.builds(_row, st.integers(0, 5), st.integers(0, 30), st.integers(0, 3), st.integers(0, 400))
# an append of a few rows (of any steps: late ones included), or a predict of a step
operations = st.lists(st.lists(rows, min_size=1, max_size=40) | st.integers(0, 7), max_size=25)
# prompts never seen (the global prior answers them), at every length the rows have
unseen = [Query(f"new{t}", 0, t, 4096) for t in range(0, 330, 3)]


def _same_predictions(got: Predictions, want: Predictions) -> None:
    assert got.source == want.source
    for name in ("p50", "p90", "value"):
        assert getattr(got, name).tobytes() == getattr(want, name).tobytes(), name


@settings(max_examples=150, deadline=None)
@given(operations, st.none() | st.integers(20, 120))
def test_a_predictor_that_followed_the_steps_answers_as_a_fresh_one(
    ops: list[list[TraceRow] | int], cap: int | None
) -> None:
    history = History(max_rows=cap)
    followed = LengthPredictor(history)
    for op in ops:
        if isinstance(op, int):
            fresh = LengthPredictor(History(history.trace))
            _same_predictions(followed.predict(unseen, op), fresh.predict(unseen, op))
        else:
            history.append(op)


def _step(step: int, scale: int = 1) -> list[TraceRow]:
    """A step's rows: 30 prompts of 5 lengths (the bins' edges stay where a step adds the same mix)."""
    return [
        TraceRow(step, f"p{p}", s, 50 * (p % 5) + 7, scale * (20 + 3 * p + s + step), 4096)
        for p in range(30)
        for s in range(4)
    ]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The global priors computed from every row (``of``) and advanced (``advanced``), in order."""
    calls: list[str] = []
    of, advanced = GlobalPrior.of, GlobalPrior.advanced

    def counted_of(*args: Any) -> GlobalPrior:
        calls.append("of")
        return of(*args)

    def counted_advanced(self: GlobalPrior, *args: Any) -> GlobalPrior | None:
        calls.append("advanced")
        return advanced(self, *args)

    monkeypatch.setattr(GlobalPrior, "of", staticmethod(counted_of))
    monkeypatch.setattr(GlobalPrior, "advanced", counted_advanced)
    return calls


def test_the_predict_after_a_steps_actuals_counts_only_that_steps_rows(counted: list[str]) -> None:
    history = History([r for s in range(3) for r in _step(s)])
    predictor = LengthPredictor(history)
    predictor.predict(unseen, 3)
    history.append(_step(3))
    got = predictor.predict(unseen, 4)
    assert counted == ["of", "advanced"]
    _same_predictions(got, LengthPredictor(History(history.trace)).predict(unseen, 4))


def test_rows_of_an_earlier_step_arriving_late_make_the_prior_count_every_row(counted: list[str]) -> None:
    history = History([r for s in range(3) for r in _step(s)])
    predictor = LengthPredictor(history)
    predictor.predict(unseen, 3)
    history.append(_step(3))
    history.append(_step(1, scale=9))  # a late report of step 1: the prior of step 3 misses them
    got = predictor.predict(unseen, 4)
    assert counted == ["of", "of"]
    want = LengthPredictor(History(history.trace)).predict(unseen, 4)
    _same_predictions(got, want)
    stale = LengthPredictor(History([r for s in range(4) for r in _step(s)])).predict(unseen, 4)
    assert got.p50.tolist() != stale.p50.tolist()  # the late rows change the answer


def test_warms_and_predicts_racing_appends_leave_every_step_answered_as_a_fresh_predictor() -> None:
    """The caches are keyed by the history's version: an entry computed while rows arrived is stored
    under the version it read, so no later call takes it for the rows held since."""
    history = History(_step(0))
    predictor = LengthPredictor(history)
    start = threading.Barrier(3)
    failures: list[BaseException] = []

    def run(work: Any) -> None:
        try:
            start.wait()
            work()
        except BaseException as error:
            failures.append(error)

    def appends() -> None:
        for step in range(1, 12):
            history.append(_step(step))
            history.append(_step(step - 1, scale=2)[:20])  # a late report of the step before

    def asks() -> None:
        for step in range(1, 13):
            predictor.warm(step)
            predictor.predict(unseen, step)

    threads = [threading.Thread(target=run, args=(w,)) for w in (appends, asks, asks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for step in range(13):
        _same_predictions(
            predictor.predict(unseen, step), LengthPredictor(History(history.trace)).predict(unseen, step)
        )


def test_rows_arriving_while_a_prior_is_advanced_leave_it_the_prior_of_rows_held_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A late report of step 1, then more of step 3, land while the prior of step 4 reads the rows
    since step 3: step 3's counts and the rows read would be of two moments (the rows of step 3 that
    came after the late ones, without those): the prior counts every row held instead."""
    history = History([r for s in range(3) for r in _step(s)])
    predictor = LengthPredictor(history)
    predictor.predict(unseen, 3)
    history.append(_step(3))
    read = history.columns_before

    def arriving(step: int, *names: str, since: int | None = None) -> tuple[np.ndarray, ...]:
        if since is not None and len(history) < 1000:
            history.append(_step(1, scale=9))
            history.append(_step(3, scale=2))
        return read(step, *names, since=since)

    monkeypatch.setattr(history, "columns_before", arriving)
    got = predictor.predict(unseen, 4)
    _same_predictions(got, LengthPredictor(History(history.trace)).predict(unseen, 4))


def test_the_four_latest_steps_asked_about_are_answered_again_without_counting(counted: list[str]) -> None:
    """Replicas ask about a step more than once (a warm, then the predict; a batch retried): each of
    the latest four steps asked about keeps its prior until rows before it arrive."""
    history = History([r for s in range(3) for r in _step(s)])
    predictor = LengthPredictor(history)
    first = [predictor.predict(unseen, step) for step in range(1, 5)]
    assert counted[0] == "of"
    asked = len(counted)
    again = [predictor.predict(unseen, step) for step in range(1, 5)]
    assert counted[asked:] == []
    for got, want in zip(again, first, strict=True):
        _same_predictions(got, want)


def test_a_step_counted_again_after_late_rows_keeps_the_other_steps_priors(counted: list[str]) -> None:
    """Late rows of step 3 change only step 4's prior: it is counted again (one entry for the step,
    the new one), and steps 1 to 3, their rows unchanged, are still answered without counting."""
    history = History([r for s in range(3) for r in _step(s)])
    predictor = LengthPredictor(history)
    first = [predictor.predict(unseen, step) for step in range(1, 5)]
    history.append(_step(3))
    asked = len(counted)
    predictor.predict(unseen, 4)
    assert len(counted) == asked + 1
    again = [predictor.predict(unseen, step) for step in range(1, 4)]
    assert len(counted) == asked + 1
    for got, want in zip(again, first, strict=False):
        _same_predictions(got, want)


def test_a_history_swapped_while_a_prior_is_counted_is_answered_from_its_own_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``use_history`` (a reload) lands while a predict counts the old history's prior, which that
    predict then caches: the new history, as many rows of each step, is never answered from it."""
    old = History([r for s in range(3) for r in _step(s)])
    new = History([r for s in range(3) for r in _step(s, scale=9)])
    predictor = LengthPredictor(old)
    read = old.columns_before

    def swapped(step: int, *names: str, since: int | None = None) -> tuple[np.ndarray, ...]:
        predictor.use_history(new)
        return read(step, *names, since=since)

    monkeypatch.setattr(old, "columns_before", swapped)
    predictor.predict(unseen, 3)  # the old history's, read before the swap
    got = predictor.predict(unseen, 4)
    _same_predictions(got, LengthPredictor(History(new.trace)).predict(unseen, 4))
