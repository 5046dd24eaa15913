"""How far the global length level moved over the part of a prompt's gap the model never saw.

In RL training a prompt recurs once per pass over the dataset, many steps after it last ran, while
output lengths drift. The model predicts a correction to the prompt's base length and learns what a
gap of k steps does from the gaps its history holds; LightGBM cannot extrapolate, so at a gap longer
than any it was fitted on (a prompt's first recurrence: the fit held only same-step siblings) prompts
recurring every 4th step at +5%/step were planned at their last run's level (p90 coverage 0.30).
So the base is projected over the excess only: ``base x exp(rate x (gap - longest gap seen))``.
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
import scipy.stats as sps

from predictors.features import base_length
from predictors.promptprior import PriorRows
from predictors.promptstats import PromptStats
from predictors.tracetable import FloatArray

DRIFT_WINDOW = 4  # latest steps the drift rate is read over, at least


@dataclass(frozen=True, eq=False)
class GapDrift:
    """Per query: the log drift expected over its unseen gap, and how uncertain that is."""

    drift: FloatArray  # log drift over the steps of its gap beyond the longest gap the history holds
    spread: FloatArray  # the drift's error at the 90th percentile (log); 0 where read from prompts


def unseen_gap(prior: PriorRows, stats: PromptStats, step: int) -> FloatArray:
    """Steps of each query's gap (``step`` minus its prompt's last run) beyond the longest gap a
    prompt of the history came back after: what the model fitted on that history never saw. 0 where
    the gap is no longer; NaN for an unseen prompt."""
    seen_longest = float(stats.step_longest_gap.max()) if len(stats.step_longest_gap) else 0.0
    excess: FloatArray = np.maximum((step - prior.last_step) - seen_longest, 0.0)
    return excess


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


def projected(prior: PriorRows, stats: PromptStats, step: int) -> tuple[FloatArray, FloatArray]:
    """(the prompt's base moved by the drift over its unseen gap, the drift's spread) of each query:
    what serving reads of the drift."""
    moved = gap_drift(stats, unseen_gap(prior, stats, step), step)
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
    integers first, so steps near 2**62 lose nothing."""
    ago = (step - stats.step_ids).astype(np.float64)  # steps before ``step``, >= 1
    levels = np.log(np.maximum(stats.step_means, 1.0))
    spans, inverse = np.unique(gap, return_inverse=True)
    window = ago[None, :] <= np.maximum(spans, ago[max(len(ago) - DRIFT_WINDOW, 0)])[:, None]
    slope, se, dof = _slopes(-ago, levels, window)
    shrunk = np.maximum(slope, 0.0) * np.maximum(0.0, 1.0 - se**2 / np.maximum(slope**2, 1e-300))
    error = np.where(dof > 0, se * sps.t.ppf(0.9, np.maximum(dof, 1)), 0.0)
    return shrunk[inverse.ravel()], error[inverse.ravel()]


def _slopes(x: FloatArray, y: FloatArray, window: np.ndarray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Least-squares slope of ``y`` on ``x`` over each row's ``window`` (a mask; 0 with one point),
    its standard error (0 below three points: no residual) and that error's degrees of freedom."""
    n = window.sum(axis=1)
    mean_x = (window * x).sum(axis=1) / n
    mean_y = (window * y).sum(axis=1) / n
    dx = np.where(window, x - mean_x[:, None], 0.0)
    dy = np.where(window, y - mean_y[:, None], 0.0)
    sxx = (dx * dx).sum(axis=1)
    safe = np.where(sxx > 0, sxx, 1.0)
    slope = np.where(sxx > 0, (dx * dy).sum(axis=1) / safe, 0.0)
    sse = ((dy - slope[:, None] * dx) ** 2).sum(axis=1)
    dof = (n - 2).astype(np.float64)
    se = np.where(dof > 0, np.sqrt(sse / np.maximum(dof, 1.0) / safe), 0.0)
    return slope, se, dof
