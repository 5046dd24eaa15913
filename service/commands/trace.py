"""``rollout-scheduler trace import|synth|push``: get a trace to replay, from real dumps or the
generator, and hand one to a running service as its history.

``import --from verl DIR`` reads veRL rollout dumps and counts tokens with a local tokenizer.json
or the model folder holding one (and says which file, and how many outputs hold tool results),
keeping a dump's extra fields only when named by ``--keep-field``;
``import --from csv|jsonl|parquet FILE --map schema=column`` renames generic columns. ``synth``
writes a calibrated synthetic trace, labelled ``source=synthetic`` on every row. The output format
follows the ``--out`` suffix (.csv, .jsonl, .parquet). ``push TRACE --url URL`` posts a trace's
rows to a service as actuals (``service.history_push``), so a deployment predicts from the prompts'
history at its first step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from service.auth.tokens import TOKEN_VARIABLE

trace_app = typer.Typer(
    help="Trace tools: import rollout records, generate synthetic traces.", no_args_is_help=True
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach the ``trace`` group to the root app."""
    del bench_app
    app.add_typer(trace_app, name="trace")


def _fail(exc: Exception, code: int = 2) -> typer.Exit:
    """One line on stderr; exit 2 for input the user can fix, 1 for a failure outside the command."""
    typer.echo(f"trace: {exc}", err=True)
    return typer.Exit(code)


# The command's flags, one alias each, so its signature reads as a list of names and defaults.
SourceArg = Annotated[str, typer.Argument(help="veRL: the rollout_data_dir folder; else the file.")]
OutFlag = Annotated[Path, typer.Option(help="Trace file to write (.csv, .jsonl or .parquet).")]
FromFlag = Annotated[str, typer.Option("--from", help="Input kind: verl, csv, jsonl or parquet.")]
TokenizerFlag = Annotated[
    Path | None,
    typer.Option(
        help="verl: local tokenizer.json, or the model folder holding it, to count prompt and output "
        "tokens with."
    ),
]
MaxNewTokensFlag = Annotated[
    int | None, typer.Option(help="verl: the run's response_length; marks outputs at it as truncated.")
]
MapFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--map", help="generic: SCHEMA_COLUMN=FILE_COLUMN, repeatable; another name renames a feature."
    ),
]
CountEosFlag = Annotated[
    bool | None,
    typer.Option(
        "--count-eos/--no-count-eos",
        help="verl, with --max-new-tokens: count the EOS a stopped output ended on, as veRL did "
        "before decoding it away (default: on).",
    ),
]
KeepFieldFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--keep-field",
        help="verl: keep this extra dump field as a feature, repeatable; only one known BEFORE "
        "generation (a reward field such as acc or overlong_reward leaks the answer).",
    ),
]


@trace_app.command("import")
def import_command(
    source: SourceArg,
    out: OutFlag,
    from_: FromFlag = "verl",
    tokenizer: TokenizerFlag = None,
    max_new_tokens: MaxNewTokensFlag = None,
    map_: MapFlag = None,
    count_eos: CountEosFlag = None,
    keep_field: KeepFieldFlag = None,
) -> None:
    """Import rollout records into the project's trace format."""
    from predictors.tracewrite import write_trace
    from scheduler.errors import InvalidInputError
    from service.traceimport.importers import import_generic, import_verl, parse_mapping

    try:
        _check_options(from_, tokenizer, max_new_tokens, map_, keep_field)
        _check_count_eos(from_, max_new_tokens, count_eos)
        _check_out(out)
        _check_not_input(Path(source), from_, out)
        if from_ == "verl":
            assert tokenizer is not None
            result = import_verl(source, tokenizer, max_new_tokens, keep_field or [], count_eos is not False)
        else:
            result = import_generic(source, from_, parse_mapping(map_ or []))
        write_trace(result.trace, out)
    except (InvalidInputError, OSError) as exc:
        raise _fail(exc) from None
    from service.replay.steps import step_span

    trace = result.trace
    steps = step_span([int(s) for s in trace.steps()])  # "steps 2,3,5", not 2-5: a lost dump shows
    trajectories = _counted(len(trace), "trajectory", "trajectories")
    prompts = _counted(len(set(trace.prompt_id.tolist())), "prompt")
    typer.echo(f"imported {trajectories}, {prompts}, {steps} from {_counted(result.files, 'file')} -> {out}")
    if result.skipped:  # a .jsonl the import did not read (not named by a step): its rows are not above
        typer.echo(_skipped_line(result.skipped))
    if result.empty:  # a 0-byte dump among the files read: its step is missing from the steps above
        typer.echo(f"no rows in {_counted(len(result.empty), 'step file')}: {', '.join(result.empty)}")
    if result.tokenizer:
        typer.echo(f"token counts: tokenizer {result.tokenizer}")
    # the import keeps no extra field unasked: said, so one known before generation is not lost unseen
    if result.dropped:
        typer.echo(
            f"fields dropped: {', '.join(result.dropped)} (--keep-field NAME keeps one as a feature, "
            "if it is known before generation: docs/trace-format.md)"
        )
    if result.clamped:
        outputs = _counted(result.clamped, "re-tokenized output")
        were = "was" if result.clamped == 1 else "were"
        typer.echo(
            f"{outputs} exceeded the cap of {_counted(max_new_tokens or 0, 'token')} and {were} capped"
        )
    if result.tool_turns:  # the dump cannot tell generated tokens from tool output: said, not guessed
        typer.echo(
            f"multi-turn: tool results in {result.tool_turns:,} of {_counted(len(trace), 'output')}; "
            "their output_tokens count the tool output the engine prefilled, not only generated tokens "
            "(docs/trace-format.md)"
        )


def _skipped_line(names: tuple[str, ...], shown: int = 6) -> str:
    """One line naming the ``.jsonl`` files a veRL import passed over (the first ``shown`` of them):
    a dump renamed by hand (``step3.jsonl``) dropped out of the trace with nothing said."""
    more = f", and {len(names) - shown:,} more" if len(names) > shown else ""
    files = _counted(len(names), ".jsonl file")
    return (
        f"skipped {files} not named by a step alone, as veRL names its dumps (12.jsonl): "
        f"{', '.join(names[:shown])}{more}"
    )


def _counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in agreement: the summary said "1 prompts" and "1 file(s)"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _check_out(out: Path) -> None:
    """The output's format, from its suffix, and that it is not a folder, before any input is read
    (writing to a folder failed only at the end, naming the temporary file it wrote first)."""
    from predictors.traceio import SUFFIXES
    from scheduler.errors import InvalidInputError
    from service.outpaths import check_file_path

    check_file_path("out", out)  # first: a folder named without a suffix is a folder, not a bad suffix
    if out.suffix not in SUFFIXES:
        raise InvalidInputError("out", str(out), f"unsupported suffix; expected one of {SUFFIXES}")


def _check_not_input(source: Path, from_: str, out: Path) -> None:
    """Refuse an ``--out`` the import reads: the source file (``--out runs.csv`` wrote the renamed
    trace over the user's own file) or a ``{step}.jsonl`` in the veRL folder, which every later import
    of it would read as a dump."""
    from scheduler.errors import InvalidInputError
    from service.outpaths import check_not_input

    check_not_input("out", out, source, "the file being imported")
    in_folder = source.is_dir() and out.parent.resolve() == source.resolve()
    if (
        from_ == "verl"
        and in_folder
        and out.suffix == ".jsonl"
        and out.stem.isascii()
        and out.stem.isdecimal()
    ):
        message = f"would be read as a rollout dump of {source} by its next import; write the trace elsewhere"
        raise InvalidInputError("out", str(out), message)


def _check_count_eos(from_: str, max_new_tokens: int | None, count_eos: bool | None) -> None:
    """Refuse ``--count-eos``/``--no-count-eos`` where it cannot act: a generic file carries its
    counts, and without the cap no dump line says which output stopped on an EOS."""
    from scheduler.errors import InvalidInputError

    if count_eos is None:
        return
    if from_ != "verl":
        raise InvalidInputError(
            "count-eos", str(count_eos), "only --from verl takes it (files carry their counts)"
        )
    if max_new_tokens is None:
        message = (
            "needs --max-new-tokens: only the cap tells an output that stopped on EOS from a truncated one"
        )
        raise InvalidInputError("count-eos", str(count_eos), message)


def _check_options(
    from_: str,
    tokenizer: Path | None,
    max_new_tokens: int | None,
    map_: list[str] | None,
    keep_field: list[str] | None,
) -> None:
    """Refuse an option the chosen input kind would ignore: a user who gave it expects it to act.
    The kind is checked first, and ``--map`` before the tokenizer: ``--from VERL`` was refused for
    its ``--tokenizer`` (``only --from verl takes it``), and a csv imported with ``--map`` but
    without ``--from`` for a missing tokenizer, neither naming the real mistake."""
    from scheduler.errors import InvalidInputError
    from scheduler.trace import INT64_MAX
    from service.traceimport.importers import GENERIC_FORMATS

    if from_ != "verl" and from_ not in GENERIC_FORMATS:
        raise InvalidInputError("from", from_, f"expected one of verl, {', '.join(GENERIC_FORMATS)}")
    if from_ == "verl":
        if map_:
            message = "only --from csv|jsonl|parquet takes --map (--from defaults to verl)"
            raise InvalidInputError("map", map_[0], message)
        if tokenizer is None:
            message = "--from verl (the default) needs --tokenizer PATH/tokenizer.json; a file needs --from"
            raise InvalidInputError("tokenizer", None, message)
        if max_new_tokens is not None and not 1 <= max_new_tokens <= INT64_MAX:
            # past int64 it was refused only after the first dump was read and counted, at its line 1
            raise InvalidInputError("max-new-tokens", max_new_tokens, f"must be 1..{INT64_MAX:,}")
        return
    for name, value in (("tokenizer", tokenizer), ("max-new-tokens", max_new_tokens)):
        if value is not None:
            raise InvalidInputError(name, str(value), "only --from verl takes it (files carry their counts)")
    if keep_field:
        message = "only --from verl takes it (a generic file's extra columns are all kept)"
        raise InvalidInputError("keep-field", keep_field[0], message)


@trace_app.command("synth")
def synth_command(
    out: Annotated[Path, typer.Option(help="Trace file to write (.csv, .jsonl or .parquet).")],
    profile: Annotated[str, typer.Option(help="short-cot or long-cot (see docs/synth.md).")] = "long-cot",
    prompts: Annotated[int, typer.Option(help="Distinct prompts, revisited every step.")] = 256,
    samples: Annotated[int, typer.Option(help="Samples per prompt per step (group size).")] = 16,
    steps: Annotated[int, typer.Option(help="Training steps (epochs).")] = 6,
    seed: Annotated[int, typer.Option(help="Seed; the same seed gives the same trace.")] = 0,
    drift: Annotated[
        float | None,
        typer.Option(help="Override the profile's length drift (log-length per step, e.g. 0.05)."),
    ] = None,
) -> None:
    """Write a calibrated SYNTHETIC trace (every row labelled source=synthetic)."""
    from predictors.synthetic import synthetic_trace
    from predictors.tracewrite import write_trace
    from scheduler.errors import InvalidInputError

    try:
        _check_out(out)
        trace = synthetic_trace(profile, prompts, samples, steps, seed, drift=drift)
        write_trace(trace, out)
    except (InvalidInputError, OSError) as exc:
        raise _fail(exc) from None
    from scheduler.synth_profiles import synth_profile

    # The drift is said too: the file does not record it, and --drift moves every length after step 0.
    used = synth_profile(profile).length.drift_per_step if drift is None else drift
    typer.echo(
        f"wrote {len(trace)} SYNTHETIC trajectories ({profile}, {prompts} prompts x {samples} samples x "
        f"{steps} steps, seed {seed}, drift {used:g}/step) -> {out}"
    )


@trace_app.command("push")
def push_command(
    trace_path: Annotated[
        Path, typer.Argument(metavar="trace", help="Trace file (.csv, .jsonl or .parquet).")
    ],
    url: Annotated[str, typer.Option(help="The service, e.g. http://scheduler:8000.")],
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_VARIABLE,
            help="A worker or trainer token; --retrain needs a trainer's (ps shows flags: use the variable).",
        ),
    ] = None,
    worker_id: Annotated[str, typer.Option(help="Worker id the imported reports name.")] = "history",
    retrain: Annotated[bool, typer.Option(help="Retrain the predictor on everything afterwards.")] = False,
) -> None:
    """Post a trace's rows to a running service as actuals: the history it predicts from."""
    from predictors.synthetic import is_synthetic
    from predictors.traceio import read_trace
    from scheduler.errors import InvalidInputError
    from service.auth.tokens import check_token_flag
    from service.client import SchedulerAPIError, SchedulerClient, ServiceUnreachableError, check_url
    from service.history_push import actual_reports, push

    try:
        check_token_flag("--token", token)
        check_url(url)
    except ValueError as exc:
        raise _fail(exc) from None
    try:
        rows = read_trace(trace_path)
        reports = actual_reports(rows, worker_id, str(trace_path))
        # the generator's rows: the history, and a model fitted on it, learn no recorded run's lengths
        of = "SYNTHETIC " if is_synthetic(rows) else ""
        with SchedulerClient(url, token=token, timeout_s=120) as client:
            pushed = push(client, reports)
            # said before retraining: a refused retrain (a worker token, too few actuals) must not
            # leave the user thinking the history was not stored either
            held = f"; {pushed.repeated} it held already" if pushed.repeated else ""  # pushed twice
            typer.echo(
                f"pushed {pushed.accepted} {of}actuals to {url} (stream length {pushed.stream_length}){held}"
            )
            if retrain:
                fitted = ", fitted on SYNTHETIC actuals" if of else ""  # GET /models says so too
                typer.echo(f"retrained: predictor {client.retrain().version}{fitted}")
    except ServiceUnreachableError as exc:  # down or timed out: not the input's fault, as in bench
        raise _fail(RuntimeError(f"service at {url} unreachable: {exc}"), code=1) from None
    except (InvalidInputError, OSError, SchedulerAPIError) as exc:
        raise _fail(exc) from None
