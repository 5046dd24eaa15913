"""Small seeded traces for predictor tests: the calibrated generator, kept tiny so fits stay cheap."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from predictors.model import FitConfig, FittedModel, fit
from predictors.synthetic import synthetic_trace
from predictors.tracetable import Trace
from scheduler.trace import TraceRow

FAST = FitConfig(num_rounds=40, calibration_folds=3)  # enough to learn, cheap enough for unit tests


def drifting_trace(
    prompts: int = 60, samples: int = 4, steps: int = 4, drift: float = 0.05, seed: int = 3
) -> Trace:
    """A short-cot trace whose lengths grow ``drift`` (log) per step."""
    return synthetic_trace("short-cot", prompts, samples, steps, seed=seed, drift=drift)


def altered(trace: Trace, rows: np.ndarray) -> Trace:
    """A copy of the trace with the selected rows' lengths, rewards and finish reasons scrambled."""
    out = trace.output_tokens.copy()
    out[rows] = np.maximum(1, out[rows] * 3 + 17)
    reward = trace.reward.copy()
    reward[rows] = 1.0 - np.nan_to_num(reward[rows])
    finish = trace.finish_reason.copy()
    finish[rows] = 0
    caps = np.where(trace.max_new_tokens > 0, np.maximum(trace.max_new_tokens, out), 0)
    return dataclasses.replace(
        trace, output_tokens=out, reward=reward, finish_reason=finish, max_new_tokens=caps
    )


def mean_runs(runs: Sequence[tuple[int, str, float]]) -> Trace:
    """Two samples of each (step, prompt, mean length): ``mean`` +- 10%, so each run's mean is exact
    (the drift tests read rates and slopes off them)."""
    return Trace.from_rows(
        TraceRow(step=s, prompt_id=p, sample_idx=k, prompt_tokens=50, output_tokens=round(m * f))
        for s, p, m in runs
        for k, f in enumerate((0.9, 1.1))
    )


def fitted_with(numeric: tuple[str, ...] = (), categorical: tuple[str, ...] = ()) -> FittedModel:
    """A model of a three-step ``drifting_trace`` with the extra features named, as a release before
    round 61 fitted them from stored actuals (a numeric one holds the output length itself, a
    categorical one a label): tests/predictors/test_store_retired_features.py and its service side."""
    trace = drifting_trace(steps=3)
    labels = np.random.default_rng(0).choice(np.array(["a", "b"], dtype=object), len(trace))
    trace = dataclasses.replace(
        trace,
        numeric={name: trace.output_tokens.astype(np.float64) for name in numeric},
        categorical=dict.fromkeys(categorical, labels),
    )
    return fit(trace, FAST)
