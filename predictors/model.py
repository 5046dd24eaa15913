"""LightGBM quantile models of log length, relative to the prompt's own history.

Two boosters, alpha 0.5 and 0.9, fit ``log(length) - log(base)``; a prediction is ``base * exp(q)``.
The p90 is then calibrated split-conformally: out-of-fold residuals (folds by prompt, never by row,
so siblings never sit on both sides) give the log shift that makes 90% of held-out examples fall at
or below it. In-sample quantile fits are over-confident on small data; the shift corrects that
without looking at any step the model will be scored on. Fixed seeds and thread counts make a fit
reproducible bit for bit.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from predictors.dataset import TrainingSet, training_set
from predictors.features import FeatureSpec
from predictors.history import History, factorize, repeated_rows
from predictors.tracetable import FloatArray, IntArray, ObjArray, Trace
from scheduler.errors import InvalidInputError

# OpenMP threads that busy-wait collapse when the cores are shared (a 2-thread fit ran 12x slower
# than a 1-thread one on a loaded 2-core machine); passive waiting keeps 2 threads the faster choice.
# It must be set before lightgbm loads its OpenMP runtime, hence at import, and never overrides a
# value the user set.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@dataclass(frozen=True)
class FitConfig:
    """LightGBM and calibration settings; the defaults are the documented, benchmarked ones."""

    num_rounds: int = 100  # boosting rounds per quantile
    learning_rate: float = 0.08
    num_leaves: int = 15
    min_data_in_leaf: int = 20
    num_threads: int = 2  # fixed, so results do not depend on the machine's core count
    seed: int = 0
    calibration_folds: int = 5  # folds by prompt for the conformal p90 shift (0: no calibration)
    calibration_rows: int = 40_000  # examples used for calibration at most (sampled by prompt)
    bagging_rows: int = 100_000  # above this many examples each tree sees a random subset of this size


@dataclass(frozen=True)
class ModelMetadata:
    """What a fitted model was built from and how well it did; stored beside it."""

    features: tuple[str, ...]  # matrix columns, in order
    categorical: dict[str, tuple[str, ...]]  # categorical feature -> levels
    training_rows: int  # trace rows in the history fitted on
    examples: int  # training examples (rows with a usable prior)
    steps: tuple[int, ...]  # steps covered
    p90_shift: float  # conformal log shift added to the p90 booster's output
    config: dict[str, Any]  # FitConfig as a dict
    fit_seconds: float
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. calibration coverage, eval figures


@dataclass(frozen=True, eq=False)
class FittedModel:
    """Two quantile boosters plus the spec that encodes their inputs."""

    p50: Any  # lightgbm.Booster at alpha 0.5
    p90: Any  # lightgbm.Booster at alpha 0.9
    spec: FeatureSpec
    metadata: ModelMetadata

    def predict(self, features: FloatArray, base: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(p50, p90) in tokens, unclipped, for rows of ``build_features`` output and their bases.

        Tree traversal is the dominant cost, so callers pass distinct rows only: the predictor
        builds one row per distinct query (``features.distinct_queries``), ~4k for 32k trajectories.
        """
        threads = self.metadata.config.get("num_threads", 1)
        q50 = self.p50.predict(features, num_threads=threads)
        q90 = self.p90.predict(features, num_threads=threads) + self.metadata.p90_shift
        return base * np.exp(q50), base * np.exp(q90)


def fit(history: History | Trace, config: FitConfig | None = None) -> FittedModel:
    """Fit both quantile models on every example of the history; a typed error if there are none."""
    config = config or FitConfig()
    trace = history.trace if isinstance(history, History) else history
    repeats = repeated_rows(trace, same_length=True)  # a report sent again (a client's retry)
    if repeats.any():
        trace = trace.take(~repeats)
    trace = _canonical(trace)
    started = time.perf_counter()
    spec = FeatureSpec.of(trace)
    data = training_set(trace, spec)
    if len(data.target) == 0:
        raise InvalidInputError(
            "history", f"{len(trace)} rows", "no prompt has an earlier step or a second sample to learn from"
        )
    dataset = _dataset(data.features, data.target, spec)
    p50 = _train(dataset, 0.5, config)
    p90 = _train(dataset, 0.9, config)
    shift, coverage = _conformal_shift(data, trace, spec, config)
    meta = ModelMetadata(
        features=spec.names,
        categorical=dict(spec.categorical),
        training_rows=len(trace),
        examples=len(data.target),
        steps=data.steps,
        p90_shift=shift,
        config=asdict(config),
        fit_seconds=time.perf_counter() - started,
        metrics={"calibration_raw_p90_coverage": coverage},
    )
    return FittedModel(p50=p50, p90=p90, spec=spec, metadata=meta)


def _params(alpha: float, config: FitConfig, examples: int) -> dict[str, Any]:
    bagging = min(1.0, config.bagging_rows / max(examples, 1))
    return {
        "bagging_fraction": bagging,
        "bagging_freq": 1 if bagging < 1.0 else 0,
        "bagging_seed": config.seed,
        "objective": "quantile",
        "alpha": alpha,
        "learning_rate": config.learning_rate,
        "num_leaves": config.num_leaves,
        "min_data_in_leaf": config.min_data_in_leaf,
        "num_threads": config.num_threads,
        "seed": config.seed,
        "deterministic": True,
        "force_col_wise": True,
        "verbosity": -1,
    }


def _dataset(x: FloatArray, y: FloatArray, spec: FeatureSpec) -> Any:
    """A LightGBM dataset, binned once and shared by both quantile fits."""
    import lightgbm as lgb

    return lgb.Dataset(
        x,
        label=y,
        feature_name=spec.lightgbm_names,
        categorical_feature=spec.categorical_indices,
        free_raw_data=False,
        params={"verbosity": -1, "max_bin": 255},
    )


def _train(dataset: Any, alpha: float, config: FitConfig) -> Any:
    import lightgbm as lgb

    examples = len(dataset.data)
    return lgb.train(_params(alpha, config, examples), dataset, num_boost_round=config.num_rounds)


def _conformal_shift(
    data: TrainingSet, trace: Trace, spec: FeatureSpec, config: FitConfig
) -> tuple[float, float]:
    """(log shift for p90, out-of-fold coverage before the shift), from folds by prompt."""
    if config.calibration_folds < 2:
        return 0.0, math.nan
    fold = _prompt_folds(trace.prompt_id[data.rows], config)
    chosen = fold >= 0
    residuals: list[FloatArray] = []
    for k in range(config.calibration_folds):
        train, test = chosen & (fold != k), fold == k
        if not np.any(test) or not np.any(train):
            continue
        booster = _train(_dataset(data.features[train], data.target[train], spec), 0.9, config)
        residuals.append(data.target[test] - booster.predict(data.features[test]))
    if not residuals:
        return 0.0, math.nan
    r = np.concatenate(residuals)
    level = min(1.0, math.ceil((len(r) + 1) * 0.9) / len(r))
    return float(np.quantile(r, level, method="higher")), float(np.mean(r <= 0))


def _sorted_codes(prompt_ids: ObjArray) -> IntArray:
    """Each row's prompt numbered by the sorted order of the ids: the same numbers whatever the
    order of the rows (first-seen codes would follow it). Sorts the distinct ids only."""
    seen, index = factorize(prompt_ids)  # first-seen codes: index's keys are in code order
    rank = np.empty(len(index), dtype=np.int64)
    rank[np.argsort(np.array(list(index), dtype=object), kind="stable")] = np.arange(len(index))
    return rank[seen]


def _canonical(trace: Trace) -> Trace:
    """The rows in one fixed order (step, prompt id, sample, length), whatever order they came in.

    LightGBM's bagging draws rows by position once a fit has more than ``bagging_rows`` examples,
    and categorical levels are numbered as first seen, so the same history shuffled (a stream
    merged from several replicas, a file sorted otherwise) fitted another model."""
    if len(trace) == 0:
        return trace
    keys = (trace.output_tokens, trace.sample_idx, _sorted_codes(trace.prompt_id), trace.step)
    order = np.lexsort(keys)
    return trace if bool(np.all(order[1:] > order[:-1])) else trace.take(order)


def _prompt_folds(prompt_ids: ObjArray, config: FitConfig) -> IntArray:
    """Fold of each example by its prompt (-1: not in the calibration sample).

    Prompts are numbered in sorted order, not first-seen order, so the folds (and hence the p90
    shift) do not depend on the order of the trace's rows: the same trace shuffled fitted a shift of
    0.0286 one way and 0.0220 the other."""
    rng = np.random.default_rng(config.seed)
    codes = _sorted_codes(prompt_ids)
    n_prompts = int(codes.max()) + 1 if len(codes) else 0
    per_prompt = rng.integers(0, config.calibration_folds, size=n_prompts)
    keep_share = min(1.0, config.calibration_rows / max(len(codes), 1))
    kept = rng.random(n_prompts) < keep_share
    return np.where(kept[codes], per_prompt[codes], -1)
