"""Walk-forward evaluation: for each step s after the first, fit on steps < s and score step s.

This is how the predictor is used (train on the epochs so far, plan the next), so it is the only
honest score: nothing of step s, not even its spread, reaches a model scored on it. Three predictors
are compared on every scored step: ``global_mean`` (length-blind), ``prompt_history_mean`` (the
prompt's mean over all earlier steps, the published baseline) and ``lightgbm`` (the serving stack:
LightGBM where a prompt has history, the fallbacks elsewhere).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from predictors.history import History
from predictors.model import FitConfig, fit
from predictors.predictor import LengthPredictor
from predictors.quantiles import ordered
from predictors.queries import NO_CAP, QueryBatch
from predictors.tracetable import FloatArray, IntArray, Trace
from scheduler.errors import InvalidInputError

PREDICTORS: tuple[str, ...] = ("global_mean", "prompt_history_mean", "lightgbm")
METRICS: tuple[str, ...] = ("mae", "mape", "spearman", "kendall", "p90_coverage")


@dataclass(frozen=True)
class Scores:
    """Accuracy of one predictor on one step (or averaged over steps); NaN where undefined."""

    mae: float  # mean absolute error of p50, tokens
    mape: float  # mean absolute error of p50 relative to the actual length
    spearman: float  # rank correlation of p50 with actuals (NaN for a constant prediction)
    kendall: float  # Kendall tau-b of p50 with actuals
    p90_coverage: float  # share of actuals at or below the p90 prediction


@dataclass(frozen=True)
class StepScores:
    """Scores of every predictor on one scored step."""

    step: int
    rows: int  # trajectories scored
    fit_rows: int  # history rows the models were fitted on
    scores: Mapping[str, Scores]  # predictor name -> scores


@dataclass(frozen=True)
class Evaluation:
    """Per-step scores and their average over scored steps."""

    steps: tuple[StepScores, ...]
    mean: Mapping[str, Scores]  # predictor -> scores averaged over steps (empty if none scored)
    note: str  # a plain statement of any limit (e.g. a single step: only fallbacks apply)


def score(p50: FloatArray, p90: FloatArray, actual: FloatArray) -> Scores:
    """The five metrics of one predictor on one set of actuals."""
    # Imported here: scipy.stats costs ~0.8 CPU-s to import, and every process that imports this
    # module for its types (each pytest worker, at collection) would pay it without scoring anything.
    from scipy import stats as sps

    err = np.abs(p50 - actual)
    constant = np.ptp(p50) == 0 or np.ptp(actual) == 0
    return Scores(
        mae=float(err.mean()),
        mape=float((err / np.maximum(actual, 1.0)).mean()),
        spearman=math.nan if constant else float(sps.spearmanr(p50, actual).statistic),
        kendall=math.nan if constant else float(sps.kendalltau(p50, actual).statistic),
        p90_coverage=float(np.mean(actual <= p90)),
    )


def evaluate(
    trace: Trace,
    config: FitConfig | None = None,
    on_step: Callable[[int], None] | None = None,
) -> Evaluation:
    """Score every step after the first; ``on_step(step)`` is called after each (for progress bars)."""
    if len(trace) == 0:
        raise InvalidInputError("trace", "0 rows", "the trace has no rows to evaluate")
    steps = trace.steps().tolist()
    if len(steps) == 1:
        note = (
            f"the trace has a single step ({steps[0]}): there is no earlier step to fit on, so only "
            "the fallbacks (prompt-length prior) would apply and nothing can be scored"
        )
        return Evaluation(steps=(), mean={}, note=note)
    results = []
    for step in steps[1:]:
        results.append(score_step(trace, step, config))
        if on_step is not None:
            on_step(step)
    return Evaluation(steps=tuple(results), mean=_average(results), note="")


def score_step(trace: Trace, step: int, config: FitConfig | None = None) -> StepScores:
    """Every predictor's scores on ``step``, each fitted on the trace's earlier steps only."""
    past, now = trace.take(trace.step < step), trace.take(trace.step == step)
    queries = QueryBatch.from_trace(now, NO_CAP)
    actual = now.output_tokens.astype(np.float64)
    history = History(past)
    g50, g90 = global_mean(past, queries.max_new_tokens)
    fallback = LengthPredictor(history).predict(queries, step, 0.9)
    try:
        model = fit(past, config)
    except InvalidInputError:
        model = None  # nothing to learn from: the serving stack answers from its fallbacks
    served = LengthPredictor(history, model).predict(queries, step, 0.9)
    return StepScores(
        step=step,
        rows=len(now),
        fit_rows=len(past),
        scores={
            "global_mean": score(g50, g90, actual),
            "prompt_history_mean": score(fallback.p50, fallback.p90, actual),
            "lightgbm": score(served.p50, served.p90, actual),
        },
    )


def global_mean(history: Trace, caps: IntArray) -> tuple[FloatArray, FloatArray]:
    """The length-blind baseline: history's mean for every query, its empirical p90 as the p90, both
    clipped to [1, cap] like every serving answer (a cap cut below the history's lengths would
    otherwise score the baseline on lengths no query can reach)."""
    y = history.output_tokens.astype(np.float64)
    n = len(caps)
    return ordered(np.full(n, y.mean()), np.full(n, np.quantile(y, 0.9)), caps)


def _average(results: list[StepScores]) -> dict[str, Scores]:
    out: dict[str, Scores] = {}
    for name in PREDICTORS:
        values = {m: [getattr(r.scores[name], m) for r in results] for m in METRICS}
        out[name] = Scores(**{m: _nanmean(v) for m, v in values.items()})
    return out


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def mean_over(evaluation: Evaluation, first: int, stop: int | None = None) -> dict[str, Scores]:
    """Every predictor's scores averaged over the scored steps in [``first``, ``stop``) (empty if none):
    a part of a run, such as the steps where rotating prompts first come back."""
    chosen = [r for r in evaluation.steps if r.step >= first and (stop is None or r.step < stop)]
    return _average(chosen) if chosen else {}


def clean(s: Scores) -> dict[str, float | None]:
    """The scores as JSON: NaN (undefined) as null, the rest rounded to six places."""
    return {m: (None if math.isnan(v := getattr(s, m)) else round(v, 6)) for m in METRICS}


def to_json(evaluation: Evaluation) -> dict[str, object]:
    """The ``--json`` object: predictor -> averaged metrics (null where undefined), plus per-step detail."""
    return {
        "predictors": {name: clean(s) for name, s in evaluation.mean.items()},
        "steps": [
            {"step": r.step, "rows": r.rows, "predictors": {k: clean(v) for k, v in r.scores.items()}}
            for r in evaluation.steps
        ],
        "note": evaluation.note,
    }
