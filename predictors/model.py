"""LightGBM quantile models of log length, relative to the prompt's own history.

Two boosters, alpha 0.5 and 0.9, fit ``log(length) - log(base)``; a prediction is ``base * exp(q)``.
The p90 is then calibrated split-conformally: residuals of held-out samples, scored as serving
scores a new step of a prompt the model was fitted on (the history's last step, by a booster fitted
on the steps before it), give the log shift that makes 90% of them fall at or below it. In-sample
quantile fits are over-confident on small data; the shift corrects that without looking at any step
the model will be scored on. Fixed seeds and thread counts make a fit reproducible bit for bit.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from predictors import cutoff
from predictors.calibration import calibration_folds, conformal_quantile, last_step_split
from predictors.dataset import TrainingSet, served_examples, training_set
from predictors.features import FeatureSpec
from predictors.history import History
from predictors.stepgroups import repeated_rows, sorted_codes
from predictors.synthetic import is_synthetic
from predictors.tracetable import FloatArray, Trace
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
    calibration_folds: int = 5  # folds of a one-step history's p90 shift (0: no shift at all)
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
    # the most steps a training example's prompt had gone unrun: the longest gap the trees learned
    # from, past which serving projects the drift (``predictors.drift``). Kept with the model, since
    # a capped history trims the long gaps it was fitted on; None in versions saved before it
    longest_gap: int | None = None


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
        builds one row per distinct query (``features.distinct_queries``), ~4k for 32k trajectories
        (32k where every prompt is distinct). Where the caller set a check (``predictors.cutoff``),
        scored ``cutoff.CHUNK_ROWS`` rows a booster call, the check before each: one call over 32k
        rows could not be cut, and ran past the service's deadline by up to 1.2 s on a starved host.
        """
        threads = self.metadata.config.get("num_threads", 1)
        q50 = np.empty(len(features), dtype=np.float64)
        q90 = np.empty(len(features), dtype=np.float64)
        chunk = cutoff.chunk_rows(len(features))
        for first in range(0, len(features), chunk):
            rows = slice(first, first + chunk)
            cutoff.check()
            q50[rows] = self.p50.predict(features[rows], num_threads=threads)
            cutoff.check()
            q90[rows] = self.p90.predict(features[rows], num_threads=threads)
        return base * np.exp(q50), base * np.exp(q90 + self.metadata.p90_shift)


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
    examples, steps, longest_gap, p50, p90 = _boosters(trace, spec, config)
    shift, coverage = _conformal_shift(trace, spec, config)
    meta = ModelMetadata(
        features=spec.names,
        categorical=dict(spec.categorical),
        training_rows=len(trace),
        examples=examples,
        steps=steps,
        p90_shift=shift,
        config=asdict(config),
        fit_seconds=time.perf_counter() - started,
        metrics={"calibration_raw_p90_coverage": coverage},
        synthetic=is_synthetic(trace),
        longest_gap=longest_gap,
    )
    return FittedModel(p50=p50, p90=p90, spec=spec, metadata=meta)


def complete_steps(trace: Trace, open_step: int | None) -> Trace:
    """The rows a retrain fits on: those of the steps before ``open_step``, the step whose actuals may
    still be arriving (the service's step being planned), where there are any; else every row.

    A retrain asked for mid-step holds that step's first finishers, the short ones: fitted on them
    (as targets, as siblings' priors, as the calibration's scored step) the model learned the step
    short, and its p90 covered 0.43-0.62 of the next step (short-cot, 300 prompts x 8, +5%/step, the
    first 40% of step 5 in, seeds 1-3; docs/experiments.md, helper predleft), 0.89-0.90 fitted on the
    complete steps. Calibrating on them alone left the boosters' bias: 0.54-0.73. A first step still
    running is all there is, so it is kept and fitted on."""
    if open_step is None:
        return trace
    complete = trace.step < open_step
    return trace if bool(complete.all()) or not bool(complete.any()) else trace.take(complete)


def _boosters(
    trace: Trace, spec: FeatureSpec, config: FitConfig
) -> tuple[int, tuple[int, ...], int, Any, Any]:
    """(examples, steps covered, longest gap of an example, p50 booster, p90 booster) of the trace; a
    typed error if it has no example. The feature matrix goes once LightGBM has binned it
    (``_dataset``), before the calibration builds its own: both held at once were the fit's peak."""
    data = training_set(trace, spec)
    examples, steps, longest_gap = len(data.target), data.steps, data.longest_gap
    if examples == 0:
        raise InvalidInputError(
            "history", f"{len(trace)} rows", "no prompt has an earlier step or a second sample to learn from"
        )
    dataset = _dataset(data, spec)
    del data  # the dataset holds the last reference to the matrix, and drops it once binned
    p50 = _train(dataset, examples, 0.5, config)
    p90 = _train(dataset, examples, 0.9, config)
    return examples, steps, longest_gap, p50, p90


def _params(alpha: float, config: FitConfig, examples: int) -> dict[str, Any]:
    """LightGBM's parameters for the quantile ``alpha``: deterministic, and bagged down to
    ``bagging_rows`` examples a tree on large fits."""
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


def _dataset(data: TrainingSet, spec: FeatureSpec) -> Any:
    """A LightGBM dataset, binned once (by the first ``_train``) and shared by both quantile fits.

    ``free_raw_data``: once binned (one byte a value) it lets go of the float64 matrix, eight a value
    (2 M examples of 18 features: 288 MB), which a caller that keeps no reference of its own frees
    then. Binned once, from the same matrix with the same parameters, both boosters are what a
    dataset of their own would give, bit for bit, as long as no parameter LightGBM bins by differs
    between the two fits, and none does (they differ in ``alpha``)."""
    import lightgbm as lgb

    return lgb.Dataset(
        data.features,
        label=data.target,
        feature_name=spec.lightgbm_names,
        categorical_feature=spec.categorical_indices,
        free_raw_data=True,
        params={"verbosity": -1, "max_bin": 255},
    )


def _train(dataset: Any, examples: int, alpha: float, config: FitConfig) -> Any:
    """The booster of quantile ``alpha``, fitted on the dataset both quantiles share (``examples``
    rows: the dataset no longer holds them to count once binned). Where the caller set a check
    (``predictors.cutoff``: the service's retrain, which gives up at the replica's stop), it runs
    after each boosting round, so a fit is cut within one round, not after all of them."""
    import lightgbm as lgb

    checks = [_checked] if cutoff.is_set() else None
    return lgb.train(
        _params(alpha, config, examples), dataset, num_boost_round=config.num_rounds, callbacks=checks
    )


def _checked(_: Any) -> None:
    """The caller's check, as a LightGBM callback (it raises out of ``lgb.train`` to cut the fit)."""
    cutoff.check()


def _conformal_shift(trace: Trace, spec: FeatureSpec, config: FitConfig) -> tuple[float, float]:
    """(log shift for p90, held-out coverage before the shift), from residuals of rows held out as
    serving meets them: the last step scored by a booster fitted on the steps before it
    (``last_step_split``), or, where the history has one step or no prompt of the last ran before,
    folds of new samples beside their siblings (``calibration_folds``)."""
    if config.calibration_folds < 2:
        return 0.0, math.nan
    r = _last_step_residuals(trace, spec, config)
    if r is None:
        r = _folds_residuals(trace, spec, config)
    if r is None:
        return 0.0, math.nan
    return conformal_quantile(r, 0.9), float(np.mean(r <= 0))


def _last_step_residuals(trace: Trace, spec: FeatureSpec, config: FitConfig) -> FloatArray | None:
    """Residuals of the calibration sample's last step, fitted on its steps before (None: one step,
    or nothing to score: no prompt of the last step ran before it, or no prompt sampled)."""
    split = last_step_split(trace, config.calibration_rows, config.seed)
    return None if split is None else _held_out_residuals(trace, *split, spec, config)


def _folds_residuals(trace: Trace, spec: FeatureSpec, config: FitConfig) -> FloatArray | None:
    """Out-of-fold residuals of every fold (None: none scored anything)."""
    folds = calibration_folds(trace, config.calibration_folds, config.calibration_rows, config.seed)
    residuals: list[FloatArray] = []
    for k in range(config.calibration_folds):
        fold = _held_out_residuals(trace, folds.fitted(k), folds.scored == k, spec, config)
        if fold is not None:
            residuals.append(fold)
    return np.concatenate(residuals) if residuals else None


def _held_out_residuals(
    trace: Trace, fitted: np.ndarray, scored: np.ndarray, spec: FeatureSpec, config: FitConfig
) -> FloatArray | None:
    """Residuals of the ``scored`` rows under a p90 booster fitted on the ``fitted`` ones (None: it
    scores nothing or fits nothing).

    The booster is fitted on a trace with the scored rows (and what must not be known of them)
    taken out before featurising, so their lengths reach neither a target nor a sibling's prior;
    the scored rows are then featurised as queries are (``served_examples``). A function of its own
    so that its rows, matrix and dataset go when it returns: held by the folds' loop, the last
    fold's were still alive while the next fold built its own, two folds' matrices at the peak."""
    if not np.any(fitted):
        return None  # no prompt in the calibration sample (calibration_rows=0)
    kept = trace.take(fitted)
    x, y = served_examples(kept, trace.take(scored), spec)
    train = training_set(kept, spec)
    del kept
    examples = len(train.target)
    if len(y) == 0 or examples == 0:
        return None
    dataset = _dataset(train, spec)
    del train  # the dataset holds the last reference to the matrix, and drops it once binned
    booster = _train(dataset, examples, 0.9, config)
    del dataset
    residuals: FloatArray = y - booster.predict(x)
    return residuals


def _canonical(trace: Trace) -> Trace:
    """The rows in one fixed order (step, prompt id, sample, length), whatever order they came in.

    LightGBM's bagging draws rows by position once a fit has more than ``bagging_rows`` examples,
    and categorical levels are numbered as first seen, so the same history shuffled (a stream
    merged from several replicas, a file sorted otherwise) fitted another model."""
    if len(trace) == 0:
        return trace
    keys = (trace.output_tokens, trace.sample_idx, sorted_codes(trace.prompt_id), trace.step)
    order = np.lexsort(keys)
    return trace if bool(np.all(order[1:] > order[:-1])) else trace.take(order)
