"""LightGBM quantile models of log length, relative to the prompt's own history.

Two boosters, alpha 0.5 and 0.9, fit ``log(length) - log(base)``; a prediction is ``base * exp(q)``.
The p90 is then calibrated split-conformally: out-of-fold residuals of held-out samples, scored as
serving scores a new step of a prompt the model was fitted on, give the log shift that makes 90% of
them fall at or below it. In-sample quantile fits are over-confident on small data; the shift
corrects that without looking at any step the model will be scored on. Fixed seeds and thread
counts make a fit reproducible bit for bit.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from predictors.dataset import served_examples, training_set
from predictors.features import FeatureSpec
from predictors.history import History
from predictors.stepgroups import factorize, repeated_rows
from predictors.synthetic import is_synthetic
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
    calibration_folds: int = 5  # folds for the conformal p90 shift (``_calibration_folds``; 0: none)
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
    # fitted on rows of the generator (``source=synthetic``): its lengths are not a recorded run's,
    # and a model learned from them must say so wherever it is shown (the labelling rule)
    synthetic: bool = False


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
    shift, coverage = _conformal_shift(trace, spec, config)
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
        synthetic=is_synthetic(trace),
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


def _conformal_shift(trace: Trace, spec: FeatureSpec, config: FitConfig) -> tuple[float, float]:
    """(log shift for p90, out-of-fold coverage before the shift), from folds shaped like serving.

    Each fold's booster is fitted on a trace with its scored rows (and what must not be known of
    their prompts, ``_calibration_folds``) taken out before featurising, so their lengths reach
    neither a target nor a sibling's prior; the scored rows are then featurised as queries are
    (``served_examples``). The residuals are those of the queries the model answers: new samples
    of prompts it was fitted on."""
    if config.calibration_folds < 2:
        return 0.0, math.nan
    folds = _calibration_folds(trace, config)
    residuals: list[FloatArray] = []
    for k in range(config.calibration_folds):
        fitted = folds.fitted(k)
        if not np.any(fitted):
            continue  # no prompt in the calibration sample (calibration_rows=0)
        kept = trace.take(fitted)
        train = training_set(kept, spec)
        x, y = served_examples(kept, trace.take(folds.scored == k), spec)
        if len(y) == 0 or len(train.target) == 0:
            continue
        booster = _train(_dataset(train.features, train.target, spec), 0.9, config)
        residuals.append(y - booster.predict(x))
    if not residuals:
        return 0.0, math.nan
    r = np.concatenate(residuals)
    return conformal_quantile(r, 0.9), float(np.mean(r <= 0))


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


ALL_FOLDS = -2  # ``_Folds.dropped``: left out of every fold's fit


@dataclass(frozen=True, eq=False)
class _Folds:
    """Which rows of the canonical trace each calibration fold scores and which it leaves out."""

    scored: IntArray  # the fold that scores the row, its fit leaving it out (-1: none)
    dropped: IntArray  # the fold whose fit leaves the row out unscored (-1: none; or ALL_FOLDS)

    def fitted(self, k: int) -> np.ndarray:
        """Rows fold ``k``'s booster is fitted on."""
        rows: np.ndarray = (self.scored != k) & (self.dropped != k) & (self.dropped != ALL_FOLDS)
        return rows


def _calibration_folds(trace: Trace, config: FitConfig) -> _Folds:
    """Each calibration prompt held out as serving meets it: a new step after the ones fitted.

    Every prompt of the calibration sample (whole prompts, up to ``calibration_rows`` rows; the
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
    rng = np.random.default_rng(config.seed)
    k = config.calibration_folds
    codes = _sorted_codes(trace.prompt_id)
    n_prompts = int(codes.max()) + 1
    kept = rng.random(n_prompts) < min(1.0, config.calibration_rows / len(codes))
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
    return _Folds(scored=out_scored, dropped=out_dropped)
