"""``rollout-scheduler predictor train|eval`` and ``bench predictor``: the length predictor from the shell.

``train`` fits on a whole trace and writes a new version to a model store (the directory the service
hot-reloads from); ``eval`` runs the walk-forward evaluation (fit on steps < s, score step s) and
prints it as a table or as JSON. ``bench predictor`` times a fit on a million generated rows and a
prediction of 32,768. Bad input is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from predictors.evaluate import Evaluation
    from predictors.model import FittedModel
    from predictors.tracetable import Trace

predictor_app = typer.Typer(help="Trajectory-length predictor: train and evaluate.", no_args_is_help=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``predictor train|eval`` and ``bench predictor|predictor-drift``."""
    app.add_typer(predictor_app, name="predictor")
    from service.commands.predictor_bench import bench_predictor, bench_predictor_drift

    bench_app.command("predictor")(bench_predictor)
    bench_app.command("predictor-drift")(bench_predictor_drift)


def _fail(command: str, exc: Exception) -> typer.Exit:
    typer.echo(f"predictor {command}: {exc}", err=True)
    return typer.Exit(2)


def _load(path: Path, command: str) -> Trace:
    from predictors.traceio import read_trace
    from scheduler.errors import SchedulerError

    try:
        return read_trace(path)
    except (SchedulerError, OSError, UnicodeDecodeError) as exc:
        raise _fail(command, exc) from None


@predictor_app.command("train")
def train(
    trace: Annotated[Path, typer.Argument(help="Trace file (.csv, .jsonl or .parquet).")],
    out: Annotated[Path, typer.Option(help="Model store directory; a new version is added to it.")],
) -> None:
    """Fit the p50/p90 LightGBM models on every row and store them as a new version.

    With two or more steps the last step is also scored by a model fitted on the steps before it, and that
    hold-out score is stored in the version's metadata, so a stored model carries its own evidence. A
    trace of the generator (rows with source=synthetic) is said to be one, in the output and in the
    version's metadata ("synthetic": true).
    """
    from predictors.model import fit
    from predictors.store import ModelStore
    from scheduler.errors import SchedulerError
    from service.outpaths import check_folder_path

    try:
        check_folder_path("out", out)  # before the fit, not after it with "[Errno 17] File exists"
    except SchedulerError as exc:
        raise _fail("train", exc) from None
    rows = _load(trace, "train")
    try:
        model = _with_holdout_metrics(fit(rows), rows)
        version = _save(model, out)
    except SchedulerError as exc:
        raise _fail("train", exc) from None
    meta = model.metadata
    of = "SYNTHETIC trace, " if meta.synthetic else ""  # the generator's lengths, as eval and replay say
    typer.echo(
        f"saved model version {version} to {ModelStore(out).path(version)}: {of}{meta.training_rows} rows, "
        f"{meta.examples} examples, steps {meta.steps[0]}..{meta.steps[-1]}, fit {meta.fit_seconds:.1f}s"
    )
    for name, value in sorted(meta.metrics.items()):
        typer.echo(f"  {name}: {value:.4g}")


def _save(model: FittedModel, out: Path) -> int:
    """A new version in the store at ``out``; a write that fails (a name longer than the file system
    takes, a full disk) names --out and the path, not only the OS's words."""
    from predictors.store import ModelStore
    from scheduler.errors import InvalidInputError

    try:
        return ModelStore(out).save(model)
    except OSError as exc:
        raise InvalidInputError("out", str(out), f"cannot be written: {exc.strerror or exc}") from None


def _with_holdout_metrics(model: FittedModel, rows: Trace) -> FittedModel:
    from predictors.evaluate import score_step

    steps = rows.steps()
    if len(steps) < 2:
        return model
    tail = score_step(rows, int(steps[-1])).scores["lightgbm"]  # fitted on every earlier step
    metrics = dict(model.metadata.metrics)
    metrics.update({f"holdout_{k}": v for k, v in dataclasses.asdict(tail).items() if not math.isnan(v)})
    return dataclasses.replace(model, metadata=dataclasses.replace(model.metadata, metrics=metrics))


@predictor_app.command("eval")
def evaluate_command(
    trace: Annotated[Path, typer.Argument(help="Trace file (.csv, .jsonl or .parquet).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
) -> None:
    """Walk forward: for each step s after the first, fit on steps < s and score step s."""
    from predictors.evaluate import evaluate, to_json
    from predictors.synthetic import is_synthetic
    from scheduler.errors import SchedulerError

    rows = _load(trace, "eval")
    try:
        result = _run_with_progress(rows) if len(rows.steps()) > 2 else evaluate(rows)
    except SchedulerError as exc:
        raise _fail("eval", exc) from None
    synthetic = is_synthetic(rows)  # scores of the generator's lengths, not a recorded run's: say so
    if as_json:
        typer.echo(json.dumps({"synthetic": synthetic, **to_json(result)}, indent=2))
    else:
        _print_table(result, synthetic)


def _run_with_progress(rows: Trace) -> Evaluation:
    """The evaluation with a progress bar on stderr (each scored step is a fit); off a terminal the
    bar is disabled, as replay's is: it would only leave a stray newline in a captured stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from predictors.evaluate import evaluate as run

    scored = len(rows.steps()) - 1
    columns = (TextColumn("scoring steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    quiet = not sys.stderr.isatty()
    with Progress(*columns, console=Console(stderr=True), transient=True, disable=quiet) as progress:
        task = progress.add_task("eval", total=scored)
        return run(rows, on_step=lambda _step: progress.advance(task))


def _print_table(result: Evaluation, synthetic: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from predictors.evaluate import METRICS

    console = Console()
    if not result.steps:
        console.print(result.note)
        return
    of = " of a SYNTHETIC trace" if synthetic else ""
    table = Table(title=f"walk-forward over {len(result.steps)} scored step(s){of}, averaged")
    table.add_column("predictor")
    for metric in METRICS:
        table.add_column(metric, justify="right")
    for name, scores in result.mean.items():
        values = [getattr(scores, m) for m in METRICS]
        table.add_row(name, *("-" if math.isnan(v) else f"{v:.4g}" for v in values))
    console.print(table)
