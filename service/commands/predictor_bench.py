"""``rollout-scheduler bench predictor``: wall times of a fit on 1,000,000 rows and a 32,768-row predict.

The targets (issue 3): fit <= 30 s, predict <= 50 ms on 2 cores. The trace comes from the calibrated
generator (scheduler.synth), so its prompts repeat across steps like a real RL run and the fit does
its real work (history features, leave-one-out priors, two quantile boosters, the conformal shift).
Wall times on a shared machine overstate the cost, so CPU seconds (all threads) are reported too:
on idle cores the wall time is at most that. Predict is timed warm (history already folded for the
step, as between two batches of one step), cold (the first call after the last step's actuals
arrived, which folds them in: every step's first predict in the service) and re-fold (the first
call after a late report of an old step, which folds the whole history again; so does every append
once a capped history is full), each a median of repeats. ``bench predictor-drift`` scores accuracy
under length drift on a generated multi-epoch trace.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from predictors.evaluate import Evaluation
    from predictors.model import FittedModel
    from predictors.tracetable import Trace


def bench_predictor(
    rows: Annotated[
        int,
        typer.Option(
            help="Rows in the generated training trace: whole prompts of --steps x --samples rows each "
            "(rounded down; the report's rows is what was fitted), at least one."
        ),
    ] = 1_000_000,
    predict_rows: Annotated[int, typer.Option(min=1, help="Trajectories per predict call.")] = 32_768,
    steps: Annotated[int, typer.Option(min=2, help="Steps (epochs) the training rows span.")] = 8,
    samples: Annotated[int, typer.Option(min=1, help="Samples per prompt per step.")] = 8,
    profile: Annotated[str, typer.Option(help="Generator profile: short-cot or long-cot.")] = "short-cot",
    threads: Annotated[
        int, typer.Option(min=1, help="LightGBM threads (the target machine has 2 cores).")
    ] = 2,
    repeats: Annotated[int, typer.Option(min=1, help="Predict calls timed; the median is reported.")] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time fit and predict at the issue's sizes; prints medians in seconds and milliseconds."""
    from predictors.model import FitConfig, fit

    prompts = _prompts(rows, steps, samples)
    started = time.perf_counter()
    trace = _generated(profile, prompts, samples, steps, 0, None)
    generate_s = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    model = fit(trace, FitConfig(num_threads=threads))
    fit_s, fit_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    report = {
        "rows": len(trace),
        "prompts": prompts,
        "steps": steps,
        "threads": threads,
        "generate_s": round(generate_s, 2),
        "fit_s": round(fit_s, 2),
        "fit_cpu_s": round(fit_cpu_s, 2),  # CPU seconds, all threads: wall on idle cores is at most this
        "fit_examples": model.metadata.examples,
        "predict_rows": predict_rows,
        **_predict_times(trace, model, steps, predict_rows, repeats),
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        typer.echo(f"{key:>26}: {value}")


def _prompts(rows: int, steps: int, samples: int) -> int:
    """The prompts a trace of ``rows`` rows holds, each seen ``samples`` times at every step; or one
    line and exit 2 for fewer rows than one prompt takes. ``--rows 1`` had fitted 64 rows without a
    word (and ``--rows 0`` too), so a figure measured at a size nobody asked for read as that size."""
    least = steps * samples
    if rows < least:
        typer.echo(
            f"bench predictor: --rows={rows}: must be >= {least} "
            f"(one prompt: --steps {steps} x --samples {samples} rows)",
            err=True,
        )
        raise typer.Exit(2)
    return rows // least


def _predict_times(
    trace: Trace, model: FittedModel, step: int, predict_rows: int, repeats: int
) -> dict[str, float]:
    """Median milliseconds of ``repeats`` predicts of ``predict_rows`` trajectories (the prompts of
    the trace's last step, ``step - 1``, repeated), each repeat a step as the service runs it: the
    actuals of the step just predicted arrive, then the next step is predicted. Cold: that first
    predict (it folds the new actuals, ``History.stats_before``); warm: the next one (nothing left to
    fold), its CPU time, and warm from ``Query`` objects rather than the columnar batch; re-fold: the
    first predict after a late report of an old step, which folds the whole history again. Each
    repeat adds ``predict_rows`` rows to the history (1,000,000 rows grow to ~1,230,000 over 7)."""
    import numpy as np

    from predictors.history import History
    from predictors.predictor import LengthPredictor
    from predictors.queries import Query, QueryBatch

    asked = trace.take(trace.step == step - 1)
    scheduled = asked.take(np.arange(predict_rows) % len(asked))
    batch = QueryBatch.from_trace(scheduled, 4096)
    queries = [
        Query(str(p), int(s), int(t), int(c))
        for p, s, t, c in zip(
            batch.prompt_id, batch.sample_idx, batch.prompt_tokens, batch.max_new_tokens, strict=True
        )
    ]
    predictor = LengthPredictor(History(trace), model)
    predictor.predict(batch, step, 0.9)  # the generated steps folded once, as a running service has
    cold, warm, objects, warm_cpu, refold = [], [], [], [], []
    for ran in range(step, step + repeats):
        predictor.observe(replace(scheduled, step=np.full(len(scheduled), ran)))  # the step's actuals
        call = partial(predictor.predict, batch, ran + 1, 0.9)
        cold.append(_timed(call))
        cpu = time.process_time()
        warm.append(_timed(call))
        warm_cpu.append(time.process_time() - cpu)
        objects.append(_timed(partial(predictor.predict, queries, ran + 1, 0.9)))
        predictor.observe(trace.take(np.arange(1)))  # a late report of step 0
        refold.append(_timed(call))
    return {
        "predict_warm_ms": round(1000 * statistics.median(warm), 1),
        "predict_warm_cpu_ms": round(1000 * statistics.median(warm_cpu), 1),
        "predict_query_objects_ms": round(1000 * statistics.median(objects), 1),
        "predict_cold_ms": round(1000 * statistics.median(cold), 1),
        "predict_refold_ms": round(1000 * statistics.median(refold), 1),
    }


def _generated(profile: str, prompts: int, samples: int, steps: int, seed: int, drift: float | None) -> Trace:
    """The generator's trace, or one line and exit 2 for a profile or drift it refuses."""
    from predictors.synthetic import synthetic_trace
    from scheduler.errors import InvalidInputError

    try:
        return synthetic_trace(profile, prompts, samples, steps, seed=seed, drift=drift)
    except InvalidInputError as error:
        typer.echo(f"bench: {error}", err=True)
        raise typer.Exit(2) from None


def _timed(call: object) -> float:
    assert callable(call)
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def bench_predictor_drift(
    profile: Annotated[str, typer.Option(help="Generator profile: short-cot or long-cot.")] = "short-cot",
    drift: Annotated[
        float | None, typer.Option(help="Log-length drift per step; default: the profile's own.")
    ] = None,
    prompts: Annotated[
        int, typer.Option(min=1, help="Distinct prompts, revisited every step (or every --rotate).")
    ] = 300,
    samples: Annotated[int, typer.Option(min=1, help="Samples per prompt per step.")] = 8,
    steps: Annotated[int, typer.Option(min=2, help="Steps; each after the first is scored.")] = 10,
    seed: Annotated[int, typer.Option(min=0, help="Generator seed.")] = 1,
    rotate: Annotated[
        int, typer.Option(min=1, help="Each prompt runs every ROTATE-th step (1: every step), as in epochs.")
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Walk-forward accuracy on a generated multi-epoch trace with length drift (the issue's drift target).

    With --rotate K each prompt runs every K-th step, as in a pass over a dataset of K batches: K
    steps of drift lie between two runs of a prompt, and the report adds the scores of the steps
    where prompts first come back (K to 2K - 1) and of the later ones."""
    from predictors.evaluate import evaluate, to_json
    from predictors.synthetic import rotating
    from scheduler.synth_profiles import synth_profile

    trace = rotating(_generated(profile, prompts, samples, steps, seed, drift), rotate)
    used = synth_profile(profile).length.drift_per_step if drift is None else drift
    evaluation = evaluate(trace)
    result = to_json(evaluation)
    scores = result["predictors"]
    assert isinstance(scores, dict)
    cut = 1.0 - scores["lightgbm"]["mae"] / scores["prompt_history_mean"]["mae"]
    report = {
        "synthetic": True,  # a generated trace: the figures are the generator's, never a recorded run's
        "profile": profile,
        "drift": used,
        "rows": len(trace),
        "steps": steps,
        "predictors": scores,
    }
    report["lightgbm_mae_reduction_vs_prompt_history_mean"] = round(cut, 4)
    if rotate > 1:
        report |= {"rotate": rotate, **_recurrences(evaluation, rotate)}
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    own = " (the profile's own)" if drift is None else ""
    typer.echo(
        f"SYNTHETIC {profile} trace ({prompts} prompts x {samples} samples x {steps} steps, seed {seed}), "
        f"drift {used:g}/step{own}, {len(trace):,} rows"
        + (f", each prompt every {rotate} steps" if rotate > 1 else "")
    )
    for name, metrics in scores.items():
        typer.echo(f"  {name:>20}: " + ", ".join(f"{k} {v}" for k, v in metrics.items()))
    typer.echo(f"  lightgbm MAE vs prompt_history_mean: {-100 * cut:+.1f}%")
    for part, part_scores in _recurrences(evaluation, rotate).items() if rotate > 1 else ():
        typer.echo(f"  {part} (every prompt runs every {rotate} steps):")
        for name, metrics in part_scores.items():
            typer.echo(f"  {name:>20}: " + ", ".join(f"{k} {v}" for k, v in metrics.items()))


def _recurrences(evaluation: Evaluation, every: int) -> dict[str, dict[str, dict[str, float | None]]]:
    """Scores of the steps where prompts run every ``every``-th step come back the first time
    (``every`` to ``2 every - 1``) and later (``2 every`` on); empty where the trace has none such."""
    from predictors.evaluate import clean, mean_over

    parts = {"first_recurrence": (every, 2 * every), "later_recurrences": (2 * every, None)}
    return {
        part: {name: clean(s) for name, s in mean_over(evaluation, *bounds).items()}
        for part, bounds in parts.items()
    }
