"""Split-conformal calibration of the p90: which rows the calibration fits and scores, and the rank of
the shift.

In-sample quantile fits are over-confident on small data, so ``model.fit`` shifts the p90 booster's
output by a quantile of held-out residuals. What makes those residuals honest is which rows are
held out, and which residual is the shift (``conformal_quantile``: the rank the split-conformal
rule names). A history of two steps or more is split as serving meets it (``last_step_split``): fit
the steps before the last, score the last, so no fitted row is of the step scored or of a later one.
A history of one step has no earlier step to fit: each prompt is held out as serving meets it, a new
sample beside siblings in the fit (``calibration_folds``). Both are here; the boosters that produce
the residuals are fitted in ``predictors.model``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from predictors.stepgroups import sorted_codes
from predictors.tracetable import FloatArray, IntArray, Trace


def conformal_quantile(residuals: FloatArray, level: float) -> float:
    """The split-conformal shift: the ``ceil((n + 1) * level)``-th smallest of ``n`` residuals (the
    largest where that rank passes ``n``), so a new residual falls at or below it with probability
    at least ``level``.

    ``np.quantile(r, k / n, method="higher")`` was used for it, which takes the element at index
    ``ceil(k / n * (n - 1))``: the (k + 1)-th smallest for most n (92nd of 100, not 91st), one order
    statistic wider than the rule. The inverse of the empirical CDF is that rank exactly."""
    n = len(residuals)
    rank = min(n, math.ceil((n + 1) * level))
    return float(np.partition(residuals, rank - 1)[rank - 1])


def last_step_split(trace: Trace, max_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows fitted, rows scored) of the calibration sample (whole prompts, up to ``max_rows`` rows):
    its rows of every step before the trace's last, and of the last; None with a single step.

    What serving meets: a model fitted on steps < s answers step s, and nothing of step s is known.
    Folds that cut each prompt at a step of its own fitted the other prompts' rows of that step and
    of later ones, which tell the booster the level of the step it scores: under a drift of 0.05 a
    step (short-cot, 300 prompts x 8 x 10 steps) the shift came out too small, and walk-forward p90
    coverage was 0.870-0.879 (seeds 1-3) where these residuals give 0.894-0.897."""
    steps = np.unique(trace.step)
    if len(steps) < 2:
        return None
    codes = sorted_codes(trace.prompt_id)
    rng = np.random.default_rng(seed)
    sample = (rng.random(int(codes.max()) + 1) < min(1.0, max_rows / len(codes)))[codes]
    last = trace.step == steps[-1]
    return sample & ~last, sample & last


ALL_FOLDS = -2  # ``Folds.dropped``: left out of every fold's fit


@dataclass(frozen=True, eq=False)
class Folds:
    """Which rows of the canonical trace each calibration fold scores and which it leaves out."""

    scored: IntArray  # the fold that scores the row, its fit leaving it out (-1: none)
    dropped: IntArray  # the fold whose fit leaves the row out unscored (-1: none; or ALL_FOLDS)

    def fitted(self, k: int) -> np.ndarray:
        """Rows fold ``k``'s booster is fitted on."""
        rows: np.ndarray = (self.scored != k) & (self.dropped != k) & (self.dropped != ALL_FOLDS)
        return rows


def calibration_folds(trace: Trace, k: int, max_rows: int, seed: int) -> Folds:
    """Each calibration prompt held out as serving meets it: a new step after the ones fitted (the
    split of a history of one step, where ``last_step_split`` has no earlier step to fit).

    Every prompt of the calibration sample (whole prompts, up to ``max_rows`` rows; the
    others are in no fit) is cut at one of its steps, drawn at random. Its steps before the cut
    stay in every fit, and its steps after it are in no fit that scores it: a prompt's later
    samples tell the booster its level, which serving never knows. If the cut is a later step,
    the prompt's fold scores that step's samples. If it is the prompt's first step there is no
    earlier one to predict from, so its samples are dealt round the folds, each scoring its share
    from the siblings left in: a served prompt's own samples are always in the fit, and the
    booster is more confident on those than on prompts it never saw (fitted on math100 step 0,
    raw p90 coverage of step 1 0.83 for prompts in the fit, 0.89 for prompts held out of it),
    which is what the earlier folds by prompt calibrated. Prompts are numbered in sorted order and
    rows sorted canonically, so the folds do not depend on the order of the trace's rows."""
    rng = np.random.default_rng(seed)
    codes = sorted_codes(trace.prompt_id)
    n_prompts = int(codes.max()) + 1
    kept = rng.random(n_prompts) < min(1.0, max_rows / len(codes))
    fold_of = rng.integers(0, k, size=n_prompts)
    order = np.lexsort((rng.random(len(codes)), trace.step, codes))  # by prompt, then step, shuffled
    prompt, step = codes[order], trace.step[order]
    new_group = np.r_[True, (prompt[1:] != prompt[:-1]) | (step[1:] != step[:-1])]
    group = np.cumsum(new_group) - 1
    rank = np.arange(len(order)) - np.flatnonzero(new_group)[group]  # the sample's place in its group
    steps_of = np.bincount(prompt[new_group], minlength=n_prompts)  # steps each prompt ran in
    first_group = np.cumsum(steps_of) - steps_of  # group number of each prompt's first step
    nth = group - first_group[prompt]  # which of its prompt's steps the row is in
    cut = np.floor(rng.random(n_prompts) * steps_of).astype(np.int64)[prompt]
    offset = rng.integers(0, k, size=int(new_group.sum()))  # where each group's dealing starts
    at_first = cut == 0
    scored = np.where(at_first, (rank + offset[group]) % k, fold_of[prompt])
    dropped = np.where(at_first, ALL_FOLDS, fold_of[prompt])
    sample = kept[prompt]
    out_scored, out_dropped = np.empty_like(codes), np.empty_like(codes)
    out_scored[order] = np.where(sample & (nth == cut), scored, -1)
    out_dropped[order] = np.where(~sample, ALL_FOLDS, np.where(sample & (nth > cut), dropped, -1))
    return Folds(scored=out_scored, dropped=out_dropped)
