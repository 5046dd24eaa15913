"""The global prior, counted (``_counted_prior``) where lengths are small integers, answers exactly
what numpy's quantiles of the rows (``_sorted_prior``) answer, to the bit; and a step's first
predict reads the history's chunks without joining every column of them."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictors import fallbacks
from predictors.fallbacks import GlobalPrior
from predictors.history import History
from predictors.predictor import LengthPredictor
from predictors.queries import QueryBatch
from tests.predictors.helpers import drifting_trace


def _assert_same_bits(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.dtype == theirs.dtype
        assert mine.tobytes() == theirs.tobytes()


lengths = st.integers(0, 3000) | st.sampled_from([0, 1, 512, 2048])  # ties: prompts sharing a length


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(lengths, lengths), min_size=1, max_size=900), st.integers(0, 1))
def test_the_counted_prior_is_the_sorted_prior_to_the_bit(pairs: list[tuple[int, int]], spread: int) -> None:
    prompt_tokens = np.array([p * 10**spread for p, _ in pairs], dtype=np.int64)
    output_tokens = np.array([y for _, y in pairs], dtype=np.int64)
    counted = fallbacks._counted_prior(prompt_tokens, output_tokens)
    assert counted is not None
    _assert_same_bits(counted, fallbacks._sorted_prior(prompt_tokens, output_tokens))


def test_lengths_too_wide_to_count_take_the_sorted_prior() -> None:
    prompt_tokens = np.array([10, 20, 2**40], dtype=np.int64)
    output_tokens = np.array([5, 7, 9], dtype=np.int64)
    assert fallbacks._counted_prior(prompt_tokens, output_tokens) is None
    prior = GlobalPrior.of(prompt_tokens, output_tokens)
    assert (prior.p50[0], prior.p90[0], prior.rows) == (7.0, 8.6, 3)


def test_a_negative_length_is_not_counted_and_the_prior_is_numpys_of_the_rows() -> None:
    """No trace holds one, but the prior is a function of any integer rows: a count per length has no
    place for -1 (in any bin but the first it landed in the bin before's longest length)."""
    prompt_tokens = 3 * np.arange(200, dtype=np.int64)
    output_tokens = np.arange(200, dtype=np.int64)
    output_tokens[150] = -1  # a row of the last bin
    assert fallbacks._counted_prior(prompt_tokens, output_tokens) is None
    prior = GlobalPrior.of(prompt_tokens, output_tokens)
    figures = (prior.edges, prior.p50, prior.p90, prior.mean)
    _assert_same_bits(figures, fallbacks._sorted_prior(prompt_tokens, output_tokens))


def test_a_generated_runs_prior_is_the_same_counted_or_sorted() -> None:
    trace = drifting_trace(prompts=3_000, samples=8, steps=4)
    counted = fallbacks._counted_prior(trace.prompt_tokens, trace.output_tokens)
    assert counted is not None
    _assert_same_bits(counted, fallbacks._sorted_prior(trace.prompt_tokens, trace.output_tokens))


def test_a_steps_first_predict_does_not_join_the_historys_columns() -> None:
    """The actuals of step 3 arrive as their own chunk; the predict of step 4 folds them and builds
    the prior from two columns. Joining the chunks first copied every column of every row (prompt
    ids, extra features): ~20 ms at 1.2 M rows on every replica's first predict of a step."""
    trace = drifting_trace(prompts=2_000, samples=8, steps=4)
    extras = {f"x{i}": np.random.default_rng(i).random(len(trace)) for i in range(32)}
    trace = replace(trace, numeric=extras)
    history = History(trace.take(trace.step < 3))
    predictor = LengthPredictor(history)
    query = QueryBatch.from_trace(trace.take(np.arange(1)), 4096)
    predictor.predict(query, step=3)  # steps 0-2 folded, as a running service has them
    history.append(trace.take(trace.step == 3))
    tracemalloc.start()
    try:
        predictor.predict(query, step=4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < sum(column.nbytes for column in extras.values()) / 4


def test_an_empty_bin_between_two_lengths_is_merged_into_the_shorter_ones_bin() -> None:
    """Prompts of 100 and 512 tokens only: the median's cut (306, interpolated) bounds a bin no row
    falls in. It is merged into the bin below it, so the edge left is a length the rows have: a new
    prompt shorter than the longer rows is predicted as the shorter rows are."""
    prompt_tokens = np.array([100] * 200 + [512] * 200, dtype=np.int64)
    output_tokens = np.array([10] * 200 + [90] * 200, dtype=np.int64)
    prior = GlobalPrior.of(prompt_tokens, output_tokens)
    assert prior.edges.tolist() == [512.0]
    p50, _ = prior.predict(np.array([99, 100, 400, 511, 512, 600]), np.full(6, 4096))
    assert p50.tolist() == [10.0, 10.0, 10.0, 10.0, 90.0, 90.0]
