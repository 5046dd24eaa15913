"""No leakage: what a feature knows about step s comes only from steps before s (or a row's siblings)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from predictors.dataset import training_set
from predictors.features import FeatureSpec, build_features, distinct_queries
from predictors.history import History
from predictors.promptprior import prior_from_stats, prior_leave_one_out
from predictors.promptstats import stats_of
from predictors.queries import NO_CAP, Query, QueryBatch
from predictors.stepgroups import factorize, step_groups
from predictors.tracetable import Trace
from scheduler.trace import TraceRow
from tests.predictors.helpers import altered, drifting_trace


def _serving_features(history: History, queries: QueryBatch, step: int, spec: FeatureSpec) -> np.ndarray:
    stats = history.stats_before(step)
    return build_features(prior_from_stats(stats, queries.prompt_id), queries, step, stats.trend, spec)


def test_serving_features_for_a_step_ignore_that_step_and_every_later_one() -> None:
    trace = drifting_trace()
    spec = FeatureSpec.of(trace)
    queries = QueryBatch.from_trace(trace.take(trace.step == 2), NO_CAP)
    before = _serving_features(History(trace), queries, 2, spec)
    changed = altered(trace, np.flatnonzero(trace.step >= 2))
    after = _serving_features(History(changed), queries, 2, spec)
    np.testing.assert_array_equal(before, after)


def test_serving_features_do_change_when_an_earlier_step_changes() -> None:
    trace = drifting_trace()
    spec = FeatureSpec.of(trace)
    queries = QueryBatch.from_trace(trace.take(trace.step == 2), NO_CAP)
    before = _serving_features(History(trace), queries, 2, spec)
    after = _serving_features(History(altered(trace, np.flatnonzero(trace.step == 1))), queries, 2, spec)
    assert not np.array_equal(before, after)  # the check above is not vacuous


def test_training_examples_of_a_step_ignore_later_steps() -> None:
    trace = drifting_trace()
    spec = FeatureSpec.of(trace)
    base = training_set(trace, spec)
    other = training_set(altered(trace, np.flatnonzero(trace.step >= 2)), spec)
    early = trace.step[base.rows] < 2
    np.testing.assert_array_equal(base.rows, other.rows)
    np.testing.assert_array_equal(base.features[early], other.features[early])


def test_a_training_row_never_sees_its_own_length() -> None:
    trace = drifting_trace()
    spec = FeatureSpec.of(trace)
    target_row = int(np.flatnonzero(trace.step == 0)[5])  # a first-step row: its prior is its siblings
    base = training_set(trace, spec)
    other = training_set(altered(trace, np.array([target_row])), spec)
    at = int(np.flatnonzero(base.rows == target_row)[0])
    # equal up to float rounding: leave-one-out subtracts the row from its group's sums
    np.testing.assert_allclose(base.features[at], other.features[at], rtol=1e-9)
    assert base.target[at] != other.target[at]


def test_history_stats_match_a_direct_fold_of_earlier_rows() -> None:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 2))
    history.append(trace.take(trace.step >= 2))
    stats = history.stats_before(3)
    direct = stats_of(trace.take(trace.step < 3), 3)
    pid = str(trace.prompt_id[0])
    mine = trace.take((trace.prompt_id == pid) & (trace.step < 3))
    last = mine.output_tokens[mine.step == 2]
    i = stats.index[pid]
    assert stats.count[i] == len(mine) == direct.count[direct.index[pid]]
    assert stats.last_mean[i] == last.mean()
    assert stats.last_max[i] == last.max()
    assert stats.step_ids.tolist() == [0, 1, 2]


def test_actuals_of_the_predicted_step_keep_its_cached_stats_and_earlier_ones_refresh_them() -> None:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 2))
    cached = history.stats_before(2)
    history.append(trace.take(trace.step == 2))  # the step being predicted reports its actuals
    assert history.stats_before(2) is cached
    history.append(trace.take(trace.step == 3).take(np.arange(1)))
    assert history.stats_before(2) is cached
    late = altered(trace, np.arange(len(trace))).take(trace.step == 1).take(np.arange(1))
    history.append(late)  # a late report from step 1 changes what step 2 may know
    refreshed = history.stats_before(2)
    assert refreshed is not cached
    assert refreshed.num_rows == cached.num_rows + 1


def test_steps_numbered_near_the_int64_limit_fold_as_small_ones_do() -> None:
    """Steps are any int64 a trace file holds (a timestamp, say); the (step, prompt) grouping key
    step x prompts + prompt overflowed past 2**63 / prompts, and prompts' lengths were mixed up."""
    trace = drifting_trace()
    shift = 2**62
    shifted = dataclasses.replace(trace, step=trace.step + shift)
    small, large = stats_of(trace, 3), stats_of(shifted, shift + 3)
    assert dict(small.index) == dict(large.index)
    for name in ("count", "total", "last_mean", "last_max", "ewm_mean", "within_ss"):
        np.testing.assert_array_equal(getattr(small, name), getattr(large, name))
    np.testing.assert_array_equal(large.last_step, small.last_step + shift)


@pytest.mark.parametrize("origin", [2**53, 2**62 - 1_000])
def test_steps_numbered_near_the_int64_limit_give_the_gap_feature_small_ones_do(origin: int) -> None:
    """The ``gap`` feature (and ``trend_gap``) read through the prior's float last step lost the gap
    past 2**53: at 2**62 the float spacing is 1,024 steps, so a gap of 3 read 0 or 1,024."""
    full = drifting_trace(steps=5)
    queries = QueryBatch.from_trace(full.take(full.step == 4), NO_CAP)
    half = np.isin(full.prompt_id, np.unique(full.prompt_id)[::2])
    trace = full.take(~(half & np.isin(full.step, [1, 4])))  # half the prompts skip steps 1 and 4
    shifted = dataclasses.replace(trace, step=trace.step + origin)
    spec = FeatureSpec.of(trace)
    gap = [spec.names.index(name) for name in ("gap", "trend_gap")]
    small = _serving_features(History(trace), queries, 7, spec)[:, gap]
    large = _serving_features(History(shifted), queries, origin + 7, spec)[:, gap]
    assert set(small[:, 0].tolist()) >= {3.0, 4.0}
    np.testing.assert_array_equal(large, small)
    trained_small, trained_large = training_set(trace, spec).features, training_set(shifted, spec).features
    np.testing.assert_array_equal(trained_large[:, gap], trained_small[:, gap])


def test_an_unknown_cap_is_missing_headroom_not_two_billion_tokens_of_it() -> None:
    # rows that record no cap (an optional field of a report) train with the NO_CAP stand-in; read as
    # a cap it put every such row past any real query's headroom
    trace = drifting_trace()
    spec = FeatureSpec.of(trace)
    rows = trace.take(trace.step == 2)
    unknown = dataclasses.replace(rows, max_new_tokens=np.zeros_like(rows.max_new_tokens))
    column = spec.names.index("log_cap_ratio")
    known = _serving_features(History(trace), QueryBatch.from_trace(rows, NO_CAP), 2, spec)[:, column]
    missing = _serving_features(History(trace), QueryBatch.from_trace(unknown, NO_CAP), 2, spec)[:, column]
    assert np.all(np.isfinite(known))
    assert np.all(np.isnan(missing))


def test_a_first_step_row_s_prior_is_its_siblings_count_mean_and_log_spread() -> None:
    lengths = [100, 200, 400, 800]
    rows = [TraceRow(0, "p", i, 50, n, 4096, "stop", 1.0, {}) for i, n in enumerate(lengths)]
    trace = Trace.from_rows(rows)
    groups = step_groups(trace, factorize(trace.prompt_id)[0])
    prior = prior_leave_one_out(trace, groups, np.arange(4))
    siblings = np.array([200.0, 400.0, 800.0])  # row 0's: the row itself left out
    assert prior.count[0] == 3
    assert prior.hist_mean[0] == pytest.approx(siblings.mean())
    assert prior.within_sd[0] == pytest.approx(np.std(np.log(siblings), ddof=1))
    assert prior.last_max[0] == 800.0


def test_a_first_step_row_s_longest_sibling_leaves_the_row_itself_out() -> None:
    """The step's longest sample sees the next longest as its siblings' longest; a length that two
    samples tie at is every row's, the tied rows' own included."""
    lengths = [100, 800, 400, 800, 300, 900]  # prompt "p": 100, 800, 400; prompt "q": 800, 300, 900
    rows = [TraceRow(0, "pq"[i // 3], i, 50, n, 4096, "stop", 1.0, {}) for i, n in enumerate(lengths)]
    trace = Trace.from_rows(rows)
    groups = step_groups(trace, factorize(trace.prompt_id)[0])
    prior = prior_leave_one_out(trace, groups, np.arange(6))
    assert prior.last_max.tolist() == [800.0, 400.0, 800.0, 900.0, 900.0, 800.0]
    tied = [TraceRow(0, "t", i, 50, n, 4096, "stop", 1.0, {}) for i, n in enumerate([500, 500, 200])]
    trace = Trace.from_rows(tied)
    groups = step_groups(trace, factorize(trace.prompt_id)[0])
    assert prior_leave_one_out(trace, groups, np.arange(3)).last_max.tolist() == [500.0, 500.0, 500.0]


def test_a_prompt_with_no_history_is_not_seen_and_one_with_history_is() -> None:
    history = History([TraceRow(0, "old", i, 50, 300 + i, 4096, "stop", 1.0, {}) for i in range(4)])
    queries = QueryBatch.of([Query("old", 0, 50, 4096, {}), Query("new", 0, 50, 4096, {})])
    prior = prior_from_stats(history.stats_before(1), queries.prompt_id)
    assert prior.seen.tolist() == [True, False]
    assert prior.count.tolist() == [4.0, 0.0]


def test_a_categorical_column_absent_from_a_batch_is_missing_for_every_query() -> None:
    history = History([TraceRow(0, "p", i, 50, 300 + i, 4096, "stop", 1.0, {}) for i in range(4)])
    spec = FeatureSpec(numeric=(), categorical={"bucket": ("easy", "hard")})
    queries = QueryBatch.of([Query("p", 0, 50, 4096, {}), Query("q", 0, 50, 4096, {})])
    stats = history.stats_before(1)
    row = build_features(prior_from_stats(stats, queries.prompt_id), queries, 1, stats.trend, spec)
    assert np.isnan(row[:, spec.categorical_indices[0]]).all()


def test_samples_agreeing_on_text_and_missing_extras_share_one_feature_row_per_prompt() -> None:
    """``distinct_queries`` compares text columns by value and a missing number (NaN) as equal to
    itself: a GRPO group with a difficulty tag and no ``temp`` is one feature row, not n."""
    spec = FeatureSpec(numeric=("temp",), categorical={"difficulty": ("easy", "hard")})
    extras: list[dict[str, float | str]] = [{"difficulty": "hard"}, {"difficulty": "easy", "temp": 0.5}]
    queries = [Query(f"p{p}", i, 50, 4096, extras[p % 2]) for p in range(3) for i in range(4)]
    batch = QueryBatch.of(queries)
    assert np.isnan(batch.numeric["temp"][:4]).all()
    positions = np.repeat(np.arange(3), 4)
    first, inverse = distinct_queries(batch, positions, np.arange(12), spec)
    assert first.tolist() == [0, 4, 8]
    assert inverse.tolist() == positions.tolist()


def test_a_sample_whose_text_extra_differs_from_its_siblings_keeps_its_own_feature_row() -> None:
    spec = FeatureSpec(numeric=(), categorical={"difficulty": ("easy", "hard")})
    queries = [Query("p0", i, 50, 4096, {"difficulty": "easy" if i == 2 else "hard"}) for i in range(4)]
    first, inverse = distinct_queries(QueryBatch.of(queries), np.zeros(4, dtype=np.int64), np.arange(4), spec)
    assert first.tolist() == inverse.tolist() == [0, 1, 2, 3]
