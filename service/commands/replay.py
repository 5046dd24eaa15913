"""``rollout-scheduler replay TRACE --workers SPEC``: what each policy would have saved on a recorded history.

Prints one table (or ``--json``), optionally writes a Gantt chart (``--plot``) and a self-contained
HTML report (``--report``). Bad input (unknown device, malformed SPEC, a trace without the required
columns, a step range with no rows) is one line on stderr and exit code 2, never a traceback; every
option is checked before the trace is read (a large trace takes seconds to load).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from predictors.tracetable import Trace
    from service.replay.harness import ReplayConfig, ReplayReport
    from service.replay.steps import StepRanges
    from service.replay.workers import WorkerRow

HELP = (
    "Replay a trace: per step, fit the predictor on earlier steps, plan with each policy, play the plan "
    "against the TRUE lengths in the simulator. Policies: round_robin, least_loaded, lpt, cpsat, oracle."
)

# What each output is, and the suffixes its name may end in: the chart is rendered once as a PNG (the
# report embeds that same PNG), so --plot g.svg or g.txt would hold a PNG under another format's name.
OUTPUT_SUFFIXES: dict[str, tuple[tuple[str, ...], str]] = {
    "plot": ((".png",), "the chart is a PNG image"),
    "report": ((".html", ".htm"), "the report is one HTML page"),
}


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``replay`` to the root app."""
    del bench_app
    app.command("replay", help=HELP)(replay_command)


# The command's flags, one alias each, so its signature reads as a list of names and defaults.
TraceArg = Annotated[Path, typer.Argument(help="Trace file (.csv, .jsonl, .parquet).")]
WorkersFlag = Annotated[str, typer.Option(help="Pool, e.g. 8xH100,8xAscend910B (optionally :max_num_seqs).")]
ModelFlag = Annotated[str, typer.Option(help="Model preset: 1.5b, 7b, 14b, 32b.")]
PoliciesFlag = Annotated[str, typer.Option(help="Comma-separated policies, or 'all'.")]
StepsFlag = Annotated[str | None, typer.Option(help="Steps to replay: 3-5, 3,5, 4 or 2-; default all.")]
StealFlag = Annotated[bool, typer.Option("--steal/--no-steal", help="Work stealing in the simulator.")]
KvAdmissionFlag = Annotated[
    bool,
    typer.Option(
        "--kv-admission/--no-kv-admission",
        help="Length-aware plans admit by projected KV peak (default; off: vLLM's admission).",
    ),
]
EngineFlag = Annotated[
    str,
    typer.Option(
        help="Engine rules the plans are played by: vllm-v0 (1% watermark, an evicted sequence "
        "restarts; the planner's model) or vllm-v1 (no watermark, it keeps its output).",
    ),
]
TimeBudgetFlag = Annotated[
    float, typer.Option(help="Per-plan budget, seconds: cpsat's search; with quantiles, lpt's too.")
]
WallClockFlag = Annotated[
    bool,
    typer.Option(
        "--wall-clock",
        help="Plan against the wall clock, as the service does: figures then vary with the host's load.",
    ),
]
AsJsonFlag = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
PlotFlag = Annotated[
    Path | None, typer.Option(help="Write a Gantt chart (PNG, a path ending in .png) of the last step.")
]
ReportFlag = Annotated[
    Path | None, typer.Option(help="Write a self-contained HTML report (a path ending in .html or .htm).")
]
SeedFlag = Annotated[int, typer.Option(help="Planner seed (the predictor's is fixed).")]
ProcessesFlag = Annotated[
    int | None,
    typer.Option(min=1, help="Worker processes playing a step's policies at once; default one per core."),
]
PerWorkerFlag = Annotated[
    str | None,
    typer.Option(
        help="Also show POLICY's plan worker by worker: planned vs simulated finish, KV area error."
    ),
]


def replay_command(
    trace: TraceArg,
    workers: WorkersFlag,
    model: ModelFlag = "7b",
    policies: PoliciesFlag = "all",
    steps: StepsFlag = None,
    steal: StealFlag = True,
    kv_admission: KvAdmissionFlag = True,
    engine: EngineFlag = "vllm-v0",
    time_budget: TimeBudgetFlag = 4.0,
    wall_clock: WallClockFlag = False,
    as_json: AsJsonFlag = False,
    plot: PlotFlag = None,
    report: ReportFlag = None,
    seed: SeedFlag = 0,
    processes: ProcessesFlag = None,
    per_worker: PerWorkerFlag = None,
) -> None:
    """Replay TRACE on the pool SPEC and report every policy's makespan against the lower bound."""
    from scheduler.errors import InvalidInputError
    from scheduler.sim_rules import engine_rules

    try:
        config, ranges = _options(workers, model, policies, steps)
        config = replace(
            config,
            steal_modes=(steal,),
            kv_admission=kv_admission,
            engine=engine,
            time_budget_s=time_budget,
            wall_clock=wall_clock,
            seed=seed,
            processes=processes or os.cpu_count() or 1,
        )
        _check_numbers(time_budget, seed)
        engine_rules(engine)  # an unknown engine is named before the trace is read
        _check_outputs(config, per_worker, (plot, report), trace)
        loaded, config = _load(trace, config, steps, ranges)
        result = _run(loaded, config, quiet=as_json)
    except (InvalidInputError, OSError) as exc:
        typer.echo(f"replay: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # the worker processes are already ended (service.interrupts)
        typer.echo("replay: interrupted", err=True)
        raise typer.Exit(130) from None
    _report(result, steal, per_worker, as_json)
    _write_outputs(result, steal, plot, report)


def _options(
    workers: str, model: str, policies: str, steps: str | None
) -> tuple[ReplayConfig, StepRanges | None]:
    """What to replay (pool, policies, the --steps ranges; the rest at its defaults), parsed without
    the trace and in the order bad input is reported: of several mistakes, the pool's is named first
    (a device that cannot hold the model included), then the policies', then the steps'."""
    from service.replay.harness import ReplayConfig, parse_policies
    from service.replay.steps import parse_steps
    from service.workerspec import parse_workers

    inventory = parse_workers(workers, model)
    names = parse_policies(policies)
    ranges = parse_steps(steps)
    return ReplayConfig(inventory=inventory, policies=names, steps=()), ranges


def _check_numbers(time_budget: float, seed: int) -> None:
    """The planner's own rules for its budget and seed, applied to the options before the trace is
    read: the planner named them (``time_budget_s``) only once the trace was loaded and fitted."""
    from scheduler.errors import InvalidInputError

    if not (math.isfinite(time_budget) and time_budget > 0):
        raise InvalidInputError("time_budget", time_budget, "must be a positive finite number of seconds")
    if seed < 0:
        raise InvalidInputError("seed", seed, "must be an integer >= 0")


def _load(
    trace: Path, config: ReplayConfig, steps: str | None, ranges: StepRanges | None
) -> tuple[Trace, ReplayConfig]:
    """The trace, read only once every option has passed (it may take seconds), and ``config`` with
    the steps ``ranges`` pick from it."""
    from predictors.traceio import read_trace
    from service.replay.steps import chosen_steps

    loaded = read_trace(trace)
    return loaded, replace(config, steps=chosen_steps(loaded, steps, ranges))


def _check_outputs(
    config: ReplayConfig, per_worker: str | None, outputs: tuple[Path | None, Path | None], trace: Path
) -> None:
    """Refuse a --per-worker policy not replayed and output paths (--plot, --report) that cannot be
    written, are the trace itself or are named for another format (``OUTPUT_SUFFIXES``), before the
    replay, which would otherwise run for minutes first."""
    from scheduler.errors import InvalidInputError
    from service.outpaths import check_distinct, check_not_input, check_suffix

    plot, report = outputs

    if per_worker is not None and per_worker not in config.policies:
        names = ", ".join(config.policies)
        raise InvalidInputError("per_worker", per_worker, f"not among --policies ({names})")
    for option, path in (("plot", plot), ("report", report)):
        _check_writable(option, path)
        if path is not None:
            check_not_input(option, path, trace, "the trace being replayed")
    check_distinct((("plot", plot), ("report", report)))
    for option, path in (("plot", plot), ("report", report)):
        if path is not None:
            check_suffix(option, path, *OUTPUT_SUFFIXES[option])


def _run(loaded: Trace, config: ReplayConfig, quiet: bool) -> ReplayReport:
    """Run the replay behind a rich progress bar on stderr (hidden for --json or a non-terminal).

    The bar gets a stderr console of its own: rich's default console is stdout, where the bar was
    drawn only when stdout was a terminal, so ``replay ... > table.txt`` or ``| tee`` showed none."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from service.replay.harness import replay, work_units

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet or not sys.stderr.isatty(),
        transient=True,
    )
    with progress:
        task = progress.add_task("replaying", total=work_units(config))
        return replay(loaded, config, lambda label: progress.update(task, advance=1, description=label))


def _report(result: ReplayReport, steal: bool, per_worker: str | None, as_json: bool) -> None:
    """The summary on stdout: a table (and --per-worker's), or one JSON object with --json."""
    rows = _worker_rows(result, per_worker, steal)
    if as_json:
        typer.echo(json.dumps(_json(result, steal, rows), indent=2))
    else:
        _print_table(result, steal)
        if rows:
            _print_workers(rows, per_worker or "", result.synthetic)


def _print_table(result: ReplayReport, steal: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from service.replay.report import COLUMNS, headline, table_rows, unlearned_note

    table = Table(title=headline(result, steal))
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in table_rows(result, steal):
        table.add_row(*row)
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    note = unlearned_note(result)
    if note:
        console.print(note, highlight=False)
    console.print(f"replay wall time {result.wall_s:.1f} s")


def _worker_rows(result: ReplayReport, policy: str | None, steal: bool) -> list[WorkerRow]:
    from service.replay.workers import worker_rows

    if policy is None:
        return []
    return [row for step in result.steps for row in worker_rows(step, policy, steal, result.config.inventory)]


def _json(result: ReplayReport, steal: bool, rows: list[WorkerRow]) -> dict[str, object]:
    from service.replay.workers import as_json

    out = result.to_json(steal)
    if rows:
        out["per_worker"] = as_json(rows)
    return out


def _print_workers(rows: list[WorkerRow], policy: str, synthetic: bool) -> None:
    """The --per-worker table; its title says a synthetic trace's rows are synthetic, as the summary's
    does: the table is read (and pasted) on its own, and its title said nothing of it."""
    from rich.console import Console
    from rich.table import Table

    label = "SYNTHETIC trace, " if synthetic else ""
    table = Table(title=f"{label}{policy}, worker by worker (area: true / planned KV-token-steps)")
    for column in (
        "step",
        "worker",
        "items",
        "planned s",
        "simulated s",
        "sim/plan",
        "area",
        "KV use",
        "last start s",
    ):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for r in rows:
        ratio = r.simulated_finish_s / r.planned_finish_s if r.planned_finish_s > 0 else 0.0
        table.add_row(
            str(r.step), r.worker_id, str(r.trajectories), f"{r.planned_finish_s:,.1f}",
            f"{r.simulated_finish_s:,.1f}", f"{ratio:.3f}", f"{r.area_ratio:.3f}", f"{r.kv_use:.2f}",
            f"{r.last_start_s:,.1f}",
        )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 150).print(table)


def _check_writable(option: str, path: Path | None) -> None:
    """Refuse an output path that cannot be written (``service.outpaths``), before the replay,
    which would otherwise run for minutes first."""
    from service.outpaths import check_file_path

    if path is not None:
        check_file_path(option, path)


def _write_outputs(result: ReplayReport, steal: bool, plot: Path | None, report: Path | None) -> None:
    """The Gantt chart of the last replayed step, as a PNG and/or inside the HTML report: both
    rendered first, then written all or none (``service.outpaths.write_all``)."""
    if plot is None and report is None:
        return
    from scheduler.errors import InvalidInputError
    from service.outpaths import write_all
    from service.replay.report import chart_title, gantt_png, html_report

    png = gantt_png(result.steps[-1], result.config.policies, steal, chart_title(result, steal))
    outputs = [("plot", plot, png)] if plot is not None else []
    if report is not None:
        outputs.append(("report", report, html_report(result, steal, png).encode("utf-8")))
    try:
        write_all(outputs)
    except InvalidInputError as exc:
        typer.echo(f"replay: {exc}", err=True)
        raise typer.Exit(2) from None
