"""Features of a trajectory, built only from what was known before its step.

One function, ``build_features``, turns (a prompt's prior, the query, the step, the global trend) into a
feature row, for training and for serving alike. The prior (``PriorRows``, ``predictors.promptprior``)
comes either from ``PromptStats`` (rows of earlier steps) or, for a prompt's first step in training,
from its sibling samples in that step (leave-one-out, marked by ``gap`` = 0). ``FeatureSpec`` names
the matrix's columns (the base features, then the trace's extra columns), which a stored model keeps.

The model predicts ``log(length) - log(base)`` where ``base`` is the prompt's EWM mean length: the
prompt's own history carries most of the signal, and a tree ensemble is far better at learning a
correction to it than at re-learning the identity from scratch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from predictors.promptprior import PriorRows
from predictors.queries import NO_CAP, QueryBatch
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
    gap = _gaps(prior, step)
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


def _gaps(prior: PriorRows, step: int) -> FloatArray:
    """Steps since each query's prompt last ran (NaN where it never did), taken in integers first:
    through the prior's float last step, a step past 2**53 (a timestamp) lost the gap (at 2**62 the
    float spacing is 1,024 steps: a gap of 3 read 0 or 1,024). Exact below 2**53 steps of gap."""
    seen = prior.seen
    last = np.where(seen, prior.last_step, step)  # unseen: no subtraction that could wrap
    gaps: FloatArray = np.where(seen, (step - last).astype(np.float64), np.nan)
    return gaps


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
