"""What the global prior keeps for the next step's advance stays small beside the history it counts.

``GlobalPrior.advanced`` (round 60) adds a step's rows to the last step's counts: a table of rows per
prompt length and rows per output length of each bin, up to 2**17 lengths wide, ~9 MiB of int64 near
that width. The predictor cached the priors of the latest four steps with their counts: a history
capped at 100,000 rows of lengths spread to 2**17 held 36 MiB of counts beside its 5.4 MiB of columns
(docs/experiments.md, edges61), where every append to a capped history trims it and so moves every
step's version, and three of the four could never be used again. Now a prior whose version lapsed
leaves the cache as a newer one is stored, and a table wider than both ``KEPT_CELLS`` and the rows it
counts is not kept (counting those rows afresh costs at most about twice the advance).
"""

from __future__ import annotations

import numpy as np

from predictors.fallbacks import GlobalPrior, PriorDefaults
from predictors.history import History
from predictors.predictor import LengthPredictor, _bounded
from predictors.priorcounts import CACHE_CELLS, COUNTED_MAX, KEPT_CELLS, PriorCounts
from predictors.queries import Query
from predictors.tracetable import Trace

ASKED = [Query(f"new{i}", 0, 100 + 37 * i, COUNTED_MAX) for i in range(16)]  # prompts never seen


def _step(step: int, rows: int, top: int, seed: int = 0) -> Trace:
    """``rows`` rows of ``step``, prompt and output lengths spread over 1..``top`` - 1."""
    rng = np.random.default_rng(seed + step)
    return Trace(
        step=np.full(rows, step, dtype=np.int64),
        prompt_id=np.array([f"p{i}" for i in range(rows)], dtype=object),
        sample_idx=np.zeros(rows, dtype=np.int64),
        prompt_tokens=rng.integers(1, top, rows),
        output_tokens=rng.integers(1, top, rows),
        max_new_tokens=np.full(rows, top, dtype=np.int64),
        finish_reason=np.full(rows, -1, dtype=np.int8),
        reward=np.full(rows, np.nan),
    )


def _counts_held(predictor: LengthPredictor) -> list[int]:
    """The cells of the counts each cached prior holds (0: none), by the cache's own record."""
    cache = predictor._global_prior_cache  # what this test bounds; no public view of it exists
    return [0 if p.counts is None else p.counts.per_bin.size + p.counts.per_length.size for _, p, _ in cache]


def test_a_capped_history_keeps_the_one_prior_an_advance_can_still_use() -> None:
    history = History(_step(0, 2_000, 200), max_rows=4_000)
    predictor = LengthPredictor(history)
    for step in range(1, 8):
        predictor.predict(ASKED, step)
        history.append(_step(step, 2_000, 200))  # past the cap: every append trims the oldest rows
    got = predictor.predict(ASKED, 8)
    assert len(_counts_held(predictor)) == 1
    want = LengthPredictor(History(history.trace)).predict(ASKED, 8)
    assert got.p50.tobytes() == want.p50.tobytes()
    assert got.p90.tobytes() == want.p90.tobytes()


def test_an_uncapped_history_keeps_the_latest_four_steps_priors_each_advanced() -> None:
    history = History(_step(0, 2_000, 200))
    predictor = LengthPredictor(history)
    for step in range(1, 8):
        predictor.predict(ASKED, step)
        history.append(_step(step, 2_000, 200))
    predictor.predict(ASKED, 8)
    assert len(_counts_held(predictor)) == 4
    assert all(_counts_held(predictor))  # narrow tables over many rows: each kept to be advanced


def test_a_table_wider_than_its_rows_and_the_floor_is_not_kept_and_the_prior_is_the_same() -> None:
    wide = _step(0, 4_000, COUNTED_MAX)
    prior = GlobalPrior.of(wide.prompt_tokens, wide.output_tokens)
    assert prior.counts is None
    assert prior.advanced(wide.prompt_tokens[:10], wide.output_tokens[:10]) is None  # counted afresh
    narrow = _step(0, 4_000, 200)
    assert GlobalPrior.of(narrow.prompt_tokens, narrow.output_tokens).counts is not None
    many = Trace.concat([_step(s, 40_000, COUNTED_MAX) for s in range(30)])  # 1.2 M rows: more than cells
    counts = GlobalPrior.of(many.prompt_tokens, many.output_tokens).counts
    assert counts is not None
    assert counts.per_bin.size > KEPT_CELLS


def test_a_history_of_few_rows_of_wide_lengths_holds_no_counts_and_answers_as_a_fresh_predictor() -> None:
    history = History(_step(0, 1_000, COUNTED_MAX))
    predictor = LengthPredictor(history)
    for step in range(1, 6):
        predictor.predict(ASKED, step)
        history.append(_step(step, 1_000, COUNTED_MAX))
    got = predictor.predict(ASKED, 6)
    assert _counts_held(predictor) == [0, 0, 0, 0]
    want = LengthPredictor(History(history.trace)).predict(ASKED, 6)
    assert got.p50.tobytes() == want.p50.tobytes()
    assert got.p90.tobytes() == want.p90.tobytes()


def test_an_uncapped_history_of_wide_lengths_keeps_counts_the_newest_step_s_and_a_few_cells_more() -> None:
    # Each table here is worth keeping (400,000 rows counted, 294,912 cells: 2**15 output lengths in
    # each of 8 bins, and the prompt lengths), and the four cached priors held all four, 9 MiB (of 2**17
    # lengths: 4 x 9 MiB, edges61). Now the newest step's counts are kept (the next step's advance adds to
    # them) and the older ones only while all fit in ``CACHE_CELLS``.
    width = 1 << 15
    history = History(Trace.concat([_step(s, 40_000, width, seed=9) for s in range(10)]))
    predictor = LengthPredictor(history)
    for step in range(10, 16):
        predictor.predict(ASKED, step)
        history.append(_step(step, 40_000, width, seed=9))
    got = predictor.predict(ASKED, 16)
    held = _counts_held(predictor)
    assert len(held) == 4
    assert held[-1] >= 9 * width  # the newest step's (8 bins and the prompt lengths), to be advanced
    assert held[:-1] == [0, 0, 0]  # another would pass the bound
    assert sum(held) <= max(held[-1], CACHE_CELLS)
    want = LengthPredictor(History(history.trace)).predict(ASKED, 16)
    assert got.p50.tobytes() == want.p50.tobytes()
    assert got.p90.tobytes() == want.p90.tobytes()
    history.append(_step(15, 2_000, width, seed=99))  # late reports of step 15: the newest lapses
    late = predictor.predict(ASKED, 16)  # counted afresh: the older priors hold no counts to advance
    fresh = LengthPredictor(History(history.trace)).predict(ASKED, 16)
    assert late.p50.tobytes() == fresh.p50.tobytes()
    assert late.p90.tobytes() == fresh.p90.tobytes()


def _table(cells: int, rows: int) -> PriorCounts:
    """Counts of ``rows`` rows whose table (a prompt length column and one bin's output lengths) has
    ``cells`` cells in all, half of them the prompt lengths'."""
    prompts = cells // 2
    return PriorCounts(
        np.zeros(prompts, dtype=np.int64),
        np.empty(0),
        np.zeros((1, cells - prompts), dtype=np.int64),
        rows,
        np.dtype(np.int64),
    )


def test_a_table_is_kept_up_to_kept_cells_whatever_its_rows_and_past_them_up_to_its_rows() -> None:
    """The rule, cell by cell: both the prompt lengths' and the bins' cells count."""
    assert _table(KEPT_CELLS, rows=1).worth_keeping
    assert not _table(KEPT_CELLS + 1, rows=1).worth_keeping
    assert _table(3 * KEPT_CELLS, rows=3 * KEPT_CELLS).worth_keeping
    assert not _table(3 * KEPT_CELLS, rows=3 * KEPT_CELLS - 1).worth_keeping


def _cached(cells: list[int]) -> tuple[tuple[tuple[int, int, int], GlobalPrior, float], ...]:
    """A predictor's cache of priors, one a step in ascending steps, holding counts of these cells."""
    one = np.zeros(1)
    priors = [GlobalPrior(one[:0], one, one, one, n, PriorDefaults(), _table(n, rows=n)) for n in cells]
    return tuple(((0, step, 0), prior, 1.0) for step, prior in enumerate(priors))


def _counts_held_in(cache: tuple[tuple[tuple[int, int, int], GlobalPrior, float], ...]) -> list[int]:
    return [0 if p.counts is None else p.counts.cells for _, p, _ in cache]


def test_the_cache_keeps_older_counts_newest_first_while_all_it_keeps_reach_cache_cells_exactly() -> None:
    """The bound cell by cell (mutation testing, helper mutants63): the newest step's counts always,
    then each older step's, newest first, while the cells kept stay within ``CACHE_CELLS``."""
    quarter = CACHE_CELLS // 4
    kept = _bounded(_cached([quarter, quarter, quarter, 2 * quarter]))
    assert _counts_held_in(kept) == [0, quarter, quarter, 2 * quarter]
    over = _bounded(_cached([1, 1, 2 * CACHE_CELLS]))  # the newest's alone pass the bound: kept, no other
    assert _counts_held_in(over) == [0, 0, 2 * CACHE_CELLS]
    assert [key for key, _, _ in over] == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]  # every prior stays
