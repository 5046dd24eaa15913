"""How predictors/drift.py reads the drift rate and the unseen gap, at the edges the end-to-end tests
of test_drift.py pass over: the longest gap seen is the whole history's, a gap of one unseen step is
projected, the rate averages every recurring prompt of the latest ``DRIFT_WINDOW`` steps, two steps
of other prompts already give a slope and a short gap reads it over the window, and the p90 is
widened by the drift's spread in quadrature, left as the model gave it where there is none."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sc

from predictors.drift import DRIFT_WINDOW, gap_drift, unseen_gap, widened_p90
from predictors.history import History
from predictors.model import fit
from predictors.predictor import LengthPredictor
from predictors.promptstats import stats_of
from predictors.queries import NO_CAP, QueryBatch
from predictors.synthetic import rotating
from scheduler.errors import InvalidInputError
from tests.predictors.helpers import FAST, drifting_trace, mean_runs

# scipy.stats is imported by the two tests that compare with it, not here: at the top it cost every
# pytest worker ~0.8 CPU-s at collection, where nothing else in the suite's collection imports it.


def test_the_longest_gap_seen_is_the_whole_history_s_not_only_the_last_step_s() -> None:
    """a came back after 3 steps (0 -> 3), c after 2 (2 -> 4): the model was fitted on a gap of 3,
    so c queried 3 steps after its last run has nothing unseen, and 5 steps after has 2."""
    stats = stats_of(mean_runs([(0, "a", 100), (2, "c", 100), (3, "a", 110), (4, "c", 120)]), 5)
    assert stats.step_longest_gap.tolist() == [0, 0, 3, 2]
    c = np.array([stats.index["c"]])
    assert unseen_gap(stats, c, 7).tolist() == [0.0]
    assert unseen_gap(stats, c, 9).tolist() == [2.0]


def test_a_gap_one_step_longer_than_any_seen_is_projected_by_one_step_of_the_rate() -> None:
    """a grew 20% over its 2-step gap: log(1.2) / 2 a step, so one step past it moves by as much."""
    stats = stats_of(mean_runs([(0, "a", 100), (1, "b", 100), (2, "a", 120)]), 3)
    moved = gap_drift(stats, np.array([1.0]), 3)
    np.testing.assert_allclose(moved.drift, [math.log(1.2) / 2])


def test_the_rate_averages_the_latest_window_of_steps_not_the_last_one_alone() -> None:
    """a ran every step: +20% at step 1, flat after. Over the latest four steps (1-4) the rate is a
    quarter of log(1.2) a step; read over the last two it was 0, the rise forgotten."""
    assert DRIFT_WINDOW == 4
    stats = stats_of(mean_runs([(s, "a", m) for s, m in enumerate([100, 120, 120, 120, 120])]), 5)
    moved = gap_drift(stats, np.array([1.0]), 5)
    np.testing.assert_allclose(moved.drift, [math.log(1.2) / 4])


def test_every_recurring_prompt_weighs_the_same_in_the_rate_so_a_step_with_more_weighs_more() -> None:
    """Step 1: a and b each back +20%; step 2: a alone back, flat. Three recurring prompts, two of
    them at log(1.2) a step: the rate is 2/3 log(1.2), not the two steps' means averaged (1/2)."""
    runs = [(0, "a", 100), (0, "b", 100), (1, "a", 120), (1, "b", 120), (2, "a", 120)]
    stats = stats_of(mean_runs(runs), 3)
    assert stats.step_matched.tolist() == [0, 2, 1]
    moved = gap_drift(stats, np.array([1.0]), 3)
    np.testing.assert_allclose(moved.drift, [2 * math.log(1.2) / 3])


def test_two_steps_of_other_prompts_give_their_slope_with_no_error_to_widen_by() -> None:
    """No prompt back yet, step means 100 then 120: the slope is log(1.2) a step, exact through two
    points (no residual: nothing shrinks it, and no spread is added)."""
    stats = stats_of(mean_runs([(0, "p0", 100), (1, "p1", 120)]), 2)
    moved = gap_drift(stats, np.array([3.0]), 2)
    np.testing.assert_allclose(moved.drift, [3 * math.log(1.2)])
    assert moved.spread.tolist() == [0.0]


def test_a_gap_shorter_than_the_window_reads_the_step_means_slope_over_the_window() -> None:
    """No prompt back yet, step means doubling each step: one unseen step moves by log 2, the slope
    over the latest four steps; read over the one step it spans, one point, there was no slope."""
    stats = stats_of(mean_runs([(s, f"p{s}", 100.0 * 2**s) for s in range(5)]), 5)
    moved = gap_drift(stats, np.array([1.0]), 5)
    np.testing.assert_allclose(moved.drift, [math.log(2)])


def test_the_drift_s_spread_adds_to_the_model_s_in_quadrature() -> None:
    """Both log spreads at the 90th percentile, read as independent normals: sqrt(w^2 + s^2), not
    w + s (the p90 moved up by as much as the spread itself)."""
    width, spread = math.log(1.5), 0.3
    widened = widened_p90(np.array([100.0]), np.array([150.0]), np.array([spread]))
    np.testing.assert_allclose(widened, [100.0 * math.exp(math.hypot(width, spread))])


def test_without_a_spread_the_p90_is_the_model_s_even_where_it_crossed_below_the_p50() -> None:
    """Quantile boosters cross now and then (the model's p90 is unclipped): with no drift spread the
    p90 is left as it came, not mirrored above the p50 (p50^2 / p90)."""
    p50, p90 = np.array([100.0, 100.0]), np.array([80.0, 150.0])
    assert widened_p90(p50, p90, np.zeros(2)).tolist() == [80.0, 150.0]


def test_the_spread_is_the_slope_s_standard_error_at_the_90th_percentile_times_the_gap() -> None:
    """Four noisy step means, two degrees of freedom: the slope's error times t(0.9, 2), the
    quantile the p90 is, over a gap of 4 steps."""
    means = [100.0, 112.0, 119.0, 136.0]
    stats = stats_of(mean_runs([(s, f"p{s}", m) for s, m in enumerate(means)]), 4)
    _, residuals, *_ = np.polyfit(np.arange(4), np.log(means), 1, full=True)
    se = math.sqrt(float(residuals[0]) / 2 / 5.0)  # residual variance / sum of (x - mean x)^2
    import scipy.stats as sps

    np.testing.assert_allclose(gap_drift(stats, np.array([4.0]), 4).spread, [4 * se * sps.t.ppf(0.9, 2)])


def test_the_t_quantile_the_drift_reads_without_scipy_stats_is_scipy_stats_own_to_the_bit() -> None:
    """``scipy.special.stdtrit`` is what ``scipy.stats.t.ppf`` computes by; the drift calls it so
    that serving does not import scipy.stats (~0.8 s of every ``serve`` start, helper ci53)."""
    import scipy.stats as sps

    dof = np.concatenate([np.arange(1.0, 20_001.0), [1e6, 1e9, 2.0**40]])
    assert np.array_equal(sc.stdtrit(dof, 0.9), sps.t.ppf(0.9, dof))


def test_three_step_means_have_one_degree_of_freedom_to_read_the_slope_s_error_from() -> None:
    """Three noisy step means: the residual of the line through them is the slope's error, t(0.9, 1)
    at the 90th percentile; only two points leave none (the test above)."""
    means = [100.0, 125.0, 130.0]
    stats = stats_of(mean_runs([(s, f"p{s}", m) for s, m in enumerate(means)]), 3)
    _, residuals, *_ = np.polyfit(np.arange(3), np.log(means), 1, full=True)
    se = math.sqrt(float(residuals[0]) / 1 / 2.0)  # residual variance / sum of (x - mean x)^2
    t_one = math.tan(0.4 * math.pi)  # t(0.9, 1), Cauchy's quantile: 3.08, not t(0.9, 2)'s 1.89 (mutants60)
    np.testing.assert_allclose(gap_drift(stats, np.array([2.0]), 3).spread, [2 * se * t_one])


def test_a_step_s_rate_averages_each_recurring_prompt_s_own_rate_over_its_own_gap() -> None:
    """At step 2, a is back after 2 steps (+44%: log(1.2) a step) and b after 1 (+10%): the step's
    rate is the mean of log(1.2) and log(1.1), and its longest gap 2."""
    runs = [(0, "a", 100), (1, "b", 100), (2, "a", 144), (2, "b", 110)]
    stats = stats_of(mean_runs(runs), 3)
    np.testing.assert_allclose(stats.step_rates[2], (math.log(1.2) + math.log(1.1)) / 2)
    assert stats.step_longest_gap[2] == 2


def test_a_rotating_trace_runs_the_kth_prompt_at_the_steps_equal_to_k_modulo_every() -> None:
    """The documented phase: the first prompt in sorted id order at steps 0, 2, 4, ..., the second at
    1, 3, 5, ..."""
    trace = rotating(drifting_trace(prompts=4, samples=1, steps=6), 2)
    ids = sorted(set(trace.prompt_id.tolist()))
    first = sorted(set(trace.step[trace.prompt_id == ids[0]].tolist()))
    second = sorted(set(trace.step[trace.prompt_id == ids[1]].tolist()))
    assert (first, second) == ([0, 2, 4], [1, 3, 5])


def test_a_rotation_of_no_steps_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        rotating(drifting_trace(prompts=4, samples=1, steps=2), 0)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_gap_the_fit_saw_is_not_projected_again_so_the_next_step_s_p50_is_unbiased(seed: int) -> None:
    """Every prompt at every step, +20% a step: the trees learned what a gap of one step does, so
    the next step's p50 is the model's own (median actual / p50 1.02-1.03). Projected once more, as
    if the gap were one step longer, it over-predicted by ~20% (0.83-0.85)."""
    trace = drifting_trace(prompts=120, samples=4, steps=5, drift=0.2, seed=seed)
    past, now = trace.take(trace.step < 4), trace.take(trace.step == 4)
    queries = QueryBatch.from_trace(now, NO_CAP)
    predicted = LengthPredictor(History(past), fit(past, FAST)).predict(queries, 4)
    ratio = float(np.median(now.output_tokens / predicted.p50))
    assert 0.93 <= ratio <= 1.12, ratio
