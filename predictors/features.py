"""Features of a trajectory, built only from what was known before its step.

One function, ``build_features``, turns (a prompt's prior, the query, the step, the global trend) into a
feature row, for training and for serving alike. The prior (``PriorRows``) comes either from
``PromptStats`` (rows of earlier steps) or, for a prompt's first step in training, from its sibling
samples in that step (leave-one-out, marked by ``gap`` = 0): the only way a model fitted on a single
step can learn how a prompt's next sample relates to its previous ones.

The model predicts ``log(length) - log(base)`` where ``base`` is the prompt's EWM mean length: the
prompt's own history carries most of the signal, and a tree ensemble is far better at learning a
correction to it than at re-learning the identity from scratch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from predictors.promptstats import PromptStats
from predictors.queries import NO_CAP, QueryBatch
from predictors.stepgroups import StepGroups
from predictors.tracetable import FloatArray, IntArray, Trace, numbers_as_text

BASE_FEATURES: tuple[str, ...] = (
    "log_base",  # log of the prompt's EWM mean length
    "hist_count",  # samples seen before
    "log_last_mean_ratio",  # last step's mean over base
    "log_hist_mean_ratio",  # all-history mean over base
    "log_last_max_ratio",  # last step's max over base
    "last_cv",  # coefficient of variation within the last step
    "within_log_sd",  # pooled within-step std of log length (NaN with one sample per step)
    "trunc_rate",  # share of earlier samples truncated at the cap
    "last_reward",  # mean reward in the latest step with rewards (NaN if none)
    "log_prompt_tokens",
    "log_cap_ratio",  # log(max_new_tokens / base): headroom before truncation
    "step",  # training progress
    "gap",  # steps since the prompt last ran (0: leave-one-out sibling prior)
    "trend",  # global drift of log mean length per step
    "trend_gap",  # trend x gap: the drift expected since the prompt last ran
)


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
    last_step: FloatArray

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
        if len(values) == 0:
            return np.full(len(pos), np.nan)
        return np.where(ok, values[safe].astype(np.float64), np.nan)

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
            last_step=take(stats.last_step),
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
            last_step=trace.step[rows].astype(np.float64),
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


@dataclass(frozen=True)
class FeatureSpec:
    """The columns a model was trained on; serving encodes queries with the same spec."""

    numeric: tuple[str, ...]  # extra numeric trace columns used as features
    categorical: Mapping[str, tuple[str, ...]]  # extra text columns -> their levels (code = index)

    @property
    def names(self) -> tuple[str, ...]:
        """All feature names, in matrix column order."""
        return (*BASE_FEATURES, *self.numeric, *self.categorical)

    @property
    def lightgbm_names(self) -> list[str]:
        """``names`` as LightGBM is given them: extra columns numbered and reduced to safe characters.

        The extra columns are named by users (trace files, workers' reports), and LightGBM refuses
        JSON punctuation in a name and a name given twice, which an extra column called ``step``
        would be. Columns are matched by position, so the names given LightGBM are only labels.
        """
        extras = [re.sub(r"[^A-Za-z0-9_.-]", "_", name) for name in self.names[len(BASE_FEATURES) :]]
        return [*BASE_FEATURES, *(f"extra{i}_{name}" for i, name in enumerate(extras))]

    @property
    def categorical_indices(self) -> list[int]:
        """Matrix columns LightGBM must treat as categorical."""
        start = len(BASE_FEATURES) + len(self.numeric)
        return list(range(start, start + len(self.categorical)))

    @staticmethod
    def of(trace: Trace) -> FeatureSpec:
        """The spec of a training trace: every extra column, categorical levels sorted."""
        levels = {k: tuple(sorted({str(v) for v in col} - {""})) for k, col in trace.categorical.items()}
        return FeatureSpec(numeric=tuple(trace.numeric), categorical=levels)


def base_length(prior: PriorRows) -> FloatArray:
    """The length the model corrects: the prompt's EWM mean, at least one token."""
    return np.maximum(np.nan_to_num(prior.ewm_mean, nan=1.0), 1.0)


def build_features(
    prior: PriorRows, queries: QueryBatch, step: int, trend: float, spec: FeatureSpec
) -> FloatArray:
    """The feature matrix (queries x ``spec.names``): the one path from history to model input."""
    base = base_length(prior)
    log_base = np.log(base)
    gap = np.where(prior.seen, step - prior.last_step, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        base_cols = [
            log_base,
            prior.count,
            np.log(np.maximum(prior.last_mean, 1.0)) - log_base,
            np.log(np.maximum(prior.hist_mean, 1.0)) - log_base,
            np.log(np.maximum(prior.last_max, 1.0)) - log_base,
            prior.last_std / np.maximum(prior.last_mean, 1.0),
            prior.within_sd,
            prior.trunc_rate,
            prior.last_reward,
            np.log1p(queries.prompt_tokens.astype(np.float64)),
            np.log(_known_caps(queries)) - log_base,
            np.full(len(base), float(step)),
            gap,
            np.full(len(base), trend),
            trend * gap,
        ]
    n = len(queries)
    extra_num = [_numbers(queries, k) for k in spec.numeric]
    extra_cat = [_encode(queries, k, levels) for k, levels in spec.categorical.items()]
    return np.column_stack([*base_cols, *extra_num, *extra_cat]) if n else np.empty((0, len(spec.names)))


def distinct_queries(
    queries: QueryBatch, positions: IntArray, rows: IntArray, spec: FeatureSpec
) -> tuple[IntArray, IntArray]:
    """(representatives, row -> representative) of ``rows``: one row per prompt (``positions``) when
    every row of a prompt agrees on each column ``build_features`` reads for ``spec`` (prompt length,
    cap, the spec's extra columns), so their feature rows are equal; else every row its own."""
    _, first, inverse = np.unique(positions[rows], return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    identity = np.arange(len(rows))
    columns: list[np.ndarray] = [queries.prompt_tokens, queries.max_new_tokens]
    for name in (*spec.numeric, *spec.categorical):
        column = queries.categorical.get(name, queries.numeric.get(name))
        if column is not None:
            columns.append(column)
    for column in columns:
        values = column[rows]
        rep = values[first][inverse]
        same = rep == values
        if values.dtype.kind == "f":
            same |= np.isnan(rep) & np.isnan(values)
        if not bool(np.all(same)):
            return identity, identity
    return first, inverse


def _known_caps(queries: QueryBatch) -> FloatArray:
    """Each query's cap, NaN (missing) where it is the ``NO_CAP`` stand-in for a row recording none.

    Read as a cap, the stand-in gave ``log_cap_ratio`` ~21 - ``log_base`` to every training row of
    actuals reported without a cap (the field is optional), and served queries, which carry theirs,
    fell in the trees' branches for enormous bases: long-cot p90 coverage 0.94 -> 0.82."""
    caps = queries.max_new_tokens.astype(np.float64)
    return np.where(queries.max_new_tokens >= NO_CAP, np.nan, caps)


def _numbers(queries: QueryBatch, name: str) -> FloatArray:
    """Numeric extra column ``name`` of the batch; NaN (missing) where absent or not a number.

    A batch holding any text in the column keeps it as text (``QueryBatch.of``), but the history
    reads numbers sent as text (``"1.5"``) as numbers: each text value is read as the number it
    spells, or else was the column missing for every query of the batch, one odd value sufficing.
    """
    text = queries.categorical.get(name)
    if text is None:
        return queries.numeric.get(name, np.full(len(queries), np.nan))
    return np.fromiter(map(_number, text), dtype=np.float64, count=len(text))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _encode(queries: QueryBatch, name: str, levels: tuple[str, ...]) -> FloatArray:
    """Category codes by the training levels; unseen or missing values are NaN (LightGBM: missing).

    A batch whose values of the column are all numbers holds it as numeric; its numbers are looked
    up as the text the training trace gave them (``1`` for 1.0).
    """
    column = queries.categorical.get(name)
    if column is None and name in queries.numeric:
        column = numbers_as_text(queries.numeric[name])
    if column is None:
        return np.full(len(queries), np.nan)
    lookup = {level: float(i) for i, level in enumerate(levels)}
    return np.fromiter(
        map(lookup.get, column, repeat(np.nan, len(column))), dtype=np.float64, count=len(column)
    )
