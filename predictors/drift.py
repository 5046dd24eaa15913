"""How far the global length level moved over the part of a prompt's gap the model never saw.

In RL training a prompt recurs once per pass over the dataset, many steps after it last ran, while
output lengths drift. The model predicts a correction to the prompt's base length and learns what a
gap of k steps does from the gaps its history holds; LightGBM cannot extrapolate, so at a gap longer
than any it was fitted on (a prompt's first recurrence: the fit held only same-step siblings) prompts
recurring every 4th step at +5%/step were planned at their last run's level (p90 coverage 0.30).
So the base is projected over the excess only: ``base x exp(rate x (gap - longest gap seen))``, the
longest gap seen being the fitted model's own (``ModelMetadata.longest_gap``), not the serving
history's, which a capped history trims.
Where the gap is one the fit saw (every later recurrence, every prompt of a run that repeats its
prompts each step) the prediction is the model's, unchanged: projecting those too double-counted what
the trees had learned, and lost long-cot p90 coverage (helper driftgap, docs/experiments.md).

The rate is read, where the latest ``DRIFT_WINDOW`` steps ran prompts that had run before, from those
prompts' own change of log mean length per step since their last run (``PromptStats.step_rates``):
free of which prompts each step ran. Where none had (the first recurrence), it is the slope of the
log global step mean over the steps the gap spans (at least the window's), shrunk by its own error
(``x max(0, 1 - se^2 / slope^2)``) and only upward: the step means differ by their prompts as well as
by the drift, and without drift the raw slope is noise projected over the gap (+3-4% MAE). Its error
widens the p90 (``widened_p90``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictors.features import base_length
from predictors.promptprior import PriorRows
from predictors.promptstats import PromptStats
from predictors.tracetable import FloatArray, IntArray

DRIFT_WINDOW = 4  # latest steps the drift rate is read over, at least


@dataclass(frozen=True, eq=False)
class GapDrift:
    """Per query: the log drift expected over its unseen gap, and how uncertain that is."""

    drift: FloatArray  # log drift over the steps of its gap beyond the longest gap the model was fitted on
    spread: FloatArray  # the drift's error at the 90th percentile (log); 0 where read from prompts


def unseen_gap(
    stats: PromptStats, positions: IntArray, step: int, fitted_longest: int | None = None
) -> FloatArray:
    """Steps of each query's gap (``step`` minus the last run of its prompt, at ``positions``) beyond
    the longest gap the model was fitted on (``fitted_longest``, kept with it; where a model does not
    say, the longest a prompt of the history came back after): what the model never saw. 0 where the
    gap is no longer; NaN for an unseen prompt (position -1). Taken in integers first: a step past
    2**53 (a timestamp) read as a float lost the gap (at 2**62, 1,024 steps).

    The model's own figure, not the history's: a history capped by ``ROLLOUT_ACTUALS_MAXLEN`` trims
    the long gaps the model was fitted on (prompts recurring every 4th step, 3 steps held: none), and
    the drift was then projected over gaps the trees had learned; and a history that grew past the
    fit projected too little."""
    if fitted_longest is not None:
        seen_longest = fitted_longest
    else:
        seen_longest = int(stats.step_longest_gap.max()) if len(stats.step_longest_gap) else 0
    ok = positions >= 0
    last = (
        stats.last_step[np.where(ok, positions, 0)]
        if len(stats.last_step)
        else np.zeros(len(positions), np.int64)
    )
    excess = np.maximum((step - last) - seen_longest, 0).astype(np.float64)
    gaps: FloatArray = np.where(ok, excess, np.nan)
    return gaps


def gap_drift(stats: PromptStats, gap: FloatArray, step: int) -> GapDrift:
    """Log drift of the length level expected over each ``gap`` up to ``step``: the rate times the
    gap; 0 where the gap is 0 or unknown (an unseen prompt), or with no recurring prompt and fewer
    than two earlier steps (no rate). Read from the step means, the rate is the slope shrunk by its
    standard error, and its error (standard error times the t quantile 0.9) times the gap is its spread."""
    drift, spread = np.zeros(len(gap)), np.zeros(len(gap))
    projected = np.isfinite(gap) & (gap > 0)
    matched = stats.step_matched[-DRIFT_WINDOW:]
    if not np.any(projected):
        return GapDrift(drift, spread)
    if matched.sum() > 0:
        rates = np.nan_to_num(stats.step_rates[-DRIFT_WINDOW:])
        drift[projected] = float(np.dot(rates, matched) / matched.sum()) * gap[projected]
    elif len(stats.step_ids) >= 2:
        slope, error = _level_slopes(stats, gap[projected], step)
        drift[projected] = slope * gap[projected]
        spread[projected] = error * gap[projected]
    return GapDrift(drift, spread)


def prepare() -> None:
    """Import what a drift's spread needs (``scipy.special``'s ``stdtrit``, the Student t quantile),
    once a model is there to predict with: only a model's predictions read the drift in serving
    (``LengthPredictor``, which calls this as it takes one), so a replica without one starts without
    scipy.special (~0.3-0.5 CPU-s of every ``serve`` start, helper ci59a), and one with a model imports
    it with the model's load (~0.1 s past LightGBM's own imports), not in its first prediction."""
    import scipy.special  # noqa: F401  (kept in sys.modules: ``_level_slopes`` reads it from there)


def projected(
    prior: PriorRows, stats: PromptStats, positions: IntArray, step: int, fitted_longest: int | None = None
) -> tuple[FloatArray, FloatArray]:
    """(the prompt's base moved by the drift over its unseen gap, the drift's spread) of each query
    (``prior`` read at its prompt's ``positions``; ``fitted_longest`` as ``unseen_gap`` takes it):
    what serving reads of the drift."""
    moved = gap_drift(stats, unseen_gap(stats, positions, step, fitted_longest), step)
    return base_length(prior) * np.exp(moved.drift), moved.spread


def widened_p90(p50: FloatArray, p90: FloatArray, spread: FloatArray) -> FloatArray:
    """The p90 once an uncertain drift is added to the model's spread: the two log spreads at the
    90th percentile added in quadrature (both read as normal and independent); unchanged where
    ``spread`` is 0."""
    width = np.log(np.maximum(p90, 1.0) / np.maximum(p50, 1.0))
    widened: FloatArray = np.where(spread > 0, p50 * np.exp(np.sqrt(width**2 + spread**2)), p90)
    return widened


def _level_slopes(stats: PromptStats, gap: FloatArray, step: int) -> tuple[FloatArray, FloatArray]:
    """Per gap: slope of the log step means over the steps it spans (at least the window's latest),
    shrunk by its standard error and never below 0, and that error at the 90th percentile (0 with two
    steps: no residual to read it from). A falling slope is not projected: it lowers the p90 the
    scheduler packs by (the costly side) and the sweep saw one only as noise (long-cot, no drift,
    seed 3: -1.6%/step shrunk, MAE +7.1% where projected). Steps are taken relative to ``step`` in
    integers first, so steps near 2**62 lose nothing.

    Each gap's steps are the latest ones, so its fit is read from sums over the newest k steps:
    O(steps + gaps). One masked fit per gap was a gaps x steps matrix (helper review44c: 5,000 of
    each at 1 M rows, ~0.6 s and ~1 GB per predict, where the predict targets 50 ms)."""
    ago = (step - stats.step_ids).astype(np.float64)  # steps before ``step``, >= 1, descending
    levels = np.log(np.maximum(stats.step_means, 1.0))
    spans, inverse = np.unique(gap, return_inverse=True)
    reach = np.maximum(spans, ago[max(len(ago) - DRIFT_WINDOW, 0)])
    newest = np.searchsorted(ago[::-1], reach, side="right")  # steps each gap's fit spans, newest first
    slope, se, dof = _suffix_slopes(ago[-1] - ago, levels - levels[-1], newest)
    shrunk = np.maximum(slope, 0.0) * np.maximum(0.0, 1.0 - se**2 / np.maximum(slope**2, 1e-300))
    from scipy.special import stdtrit  # t.ppf's own: scipy.stats took ~0.8 s of every serve start

    error = np.where(dof > 0, se * stdtrit(np.maximum(dof, 1), 0.9), 0.0)
    return shrunk[inverse.ravel()], error[inverse.ravel()]


def _suffix_slopes(
    x: FloatArray, y: FloatArray, counts: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Least-squares slope of ``y`` on ``x`` over the last ``counts[j]`` points, for each j (0 with
    one point), its standard error (0 below three points: no residual) and that error's degrees of
    freedom. ``x`` and ``y`` are taken relative to their last point, which every fit holds: the sums
    of squares then lose at most a factor of the point count to cancellation."""
    n = counts.astype(np.float64)
    sums = [np.concatenate([[0.0], np.cumsum(v[::-1])])[counts] for v in (x, y, x * x, x * y, y * y)]
    sx, sy, sxx_raw, sxy_raw, syy_raw = sums
    sxx = np.maximum(sxx_raw - sx * sx / n, 0.0)
    sxy = sxy_raw - sx * sy / n
    syy = np.maximum(syy_raw - sy * sy / n, 0.0)
    safe = np.where(sxx > 0, sxx, 1.0)
    slope = np.where(sxx > 0, sxy / safe, 0.0)
    sse = np.maximum(syy - slope * sxy, 0.0)
    dof = n - 2
    se = np.where(dof > 0, np.sqrt(sse / np.maximum(dof, 1.0) / safe), 0.0)
    return slope, se, dof
