"""What was known of each query's prompt before its step: ``PriorRows``, the one input of the
features that describes the prompt itself.

Two sources give it. Serving (and training, for a prompt that ran in an earlier step) reads the
prompt's ``PromptStats``: ``prior_from_stats`` / ``prior_at``. Training, for a row in its prompt's
first step, reads the row's siblings of the same step with the row itself left out
(``prior_leave_one_out``): the only way a model fitted on a single step can learn how a prompt's
next sample relates to its previous ones, and leaving the row out keeps its own length out of its
features. Not to be confused with the global prior (``predictors.fallbacks.GlobalPrior``), the
prompt-length answer for a prompt never seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictors.promptstats import PromptStats
from predictors.stepgroups import StepGroups
from predictors.tracetable import FloatArray, IntArray, Trace


@dataclass(frozen=True, eq=False)
class PriorRows:
    """What was known about each query's prompt, aligned with the queries (count 0: nothing)."""

    count: FloatArray
    hist_mean: FloatArray
    last_mean: FloatArray
    last_max: FloatArray
    last_std: FloatArray
    ewm_mean: FloatArray
    trunc_rate: FloatArray
    last_reward: FloatArray
    within_sd: FloatArray
    last_step: IntArray  # -1 where unseen; an integer, so that ``step - last_step`` (the model's ``gap``)
    # stays exact at any int64 step: a float last step lost the gap past 2**53 (a timestamp step)

    @property
    def seen(self) -> np.ndarray:
        """Queries whose prompt has any history."""
        return self.count > 0


def prior_from_stats(stats: PromptStats, prompt_ids: Sequence[str] | np.ndarray) -> PriorRows:
    """Gather each query's prompt aggregates; unseen prompts get count 0 and NaN elsewhere."""
    return prior_at(stats, stats.positions(prompt_ids))


def prior_at(stats: PromptStats, pos: IntArray) -> PriorRows:
    """``prior_from_stats`` for prompt positions already looked up (-1: no history)."""
    ok = pos >= 0
    safe = np.where(ok, pos, 0)

    def take(values: np.ndarray) -> FloatArray:
        """``values`` of each query's prompt as floats, NaN where the prompt has no history."""
        if len(values) == 0:
            return np.full(len(pos), np.nan)
        return np.where(ok, values[safe].astype(np.float64), np.nan)

    last = stats.last_step[safe] if len(stats.last_step) else np.zeros(len(pos), dtype=np.int64)
    count = np.where(ok, take(stats.count), 0.0) if len(stats.count) else np.zeros(len(pos))
    with np.errstate(invalid="ignore", divide="ignore"):
        return PriorRows(
            count=count,
            hist_mean=take(stats.total) / count,
            last_mean=take(stats.last_mean),
            last_max=take(stats.last_max),
            last_std=take(stats.last_std),
            ewm_mean=take(stats.ewm_mean),
            trunc_rate=take(stats.truncated) / count,
            last_reward=take(stats.last_reward),
            within_sd=np.sqrt(take(stats.within_ss) / take(stats.within_df)),
            last_step=np.where(ok, last, -1),
        )


def prior_leave_one_out(trace: Trace, groups: StepGroups, rows: IntArray) -> PriorRows:
    """For training rows: each row's prior is its siblings in the same step (the row itself left out).

    Rows whose group has a single sample get count 0 (no prior). Leaving the row out is what keeps
    this free of leakage: a row's features never contain its own length.
    """
    g = groups.row_group[rows]
    n = groups.n[g].astype(np.float64)
    others = n - 1
    y = trace.output_tokens[rows].astype(np.float64)
    logy = np.log(np.maximum(y, 1.0))
    trunc = trace.truncated[rows].astype(np.float64)
    reward = trace.reward[rows]
    known = ~np.isnan(reward)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (groups.total[g] - y) / others
        var = (groups.sumsq[g] - y * y) / others - mean * mean
        log_mean = (groups.log_sum[g] - logy) / others
        log_var = ((groups.log_sumsq[g] - logy * logy) - others * log_mean**2) / (others - 1)
        r_n = groups.reward_n[g] - known
        r_mean = (groups.reward_sum[g] - np.where(known, reward, 0.0)) / r_n
        valid = others > 0
        return PriorRows(
            count=np.where(valid, others, 0.0),
            hist_mean=np.where(valid, mean, np.nan),
            last_mean=np.where(valid, mean, np.nan),
            last_max=np.where(valid, _max_of_others(trace, groups, rows), np.nan),
            last_std=np.where(valid, np.sqrt(np.maximum(var, 0.0)), np.nan),
            ewm_mean=np.where(valid, mean, np.nan),
            trunc_rate=np.where(valid, (groups.truncated[g] - trunc) / others, np.nan),
            last_reward=np.where(r_n > 0, r_mean, np.nan),
            within_sd=np.where(others > 1, np.sqrt(np.maximum(log_var, 0.0)), np.nan),
            last_step=trace.step[rows],
        )


def _max_of_others(trace: Trace, groups: StepGroups, rows: IntArray) -> FloatArray:
    """Group max excluding the row: the max itself unless the row is the group's only maximum."""
    g = groups.row_group[rows]
    y = trace.output_tokens[rows].astype(np.float64)
    is_max = y == groups.maximum[g]
    n_max = np.bincount(g, weights=is_max, minlength=len(groups.n))
    second = np.full(len(groups.n), np.nan)
    np.fmax.at(second, g[~is_max], y[~is_max])
    return np.where(is_max & (n_max[g] == 1), second[g], groups.maximum[g])
