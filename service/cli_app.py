"""The ``rollout-scheduler`` command line: one root Typer app, one module per command group.

``service.cli.main`` (the console script) runs it (``run``), after what must come before its imports.
Each command group lives in its own module under ``service/commands/`` and is registered here, so the
root stays a table of contents. Command modules import their heavy dependencies lazily inside the
command functions, so ``rollout-scheduler --help`` stays fast.
"""

from __future__ import annotations

import inspect
import sys

import typer

from service.cli import OWNS_PROCESS, exit_decided

app = typer.Typer(
    name="rollout-scheduler",
    help="Length-aware, device-aware scheduling of RL rollout batches.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    help="Benchmarks: solver, predictor, predictor-drift, service, delivery, redis-memory "
    "(`make bench` runs them all into docs/benchmarks.md).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


_registered = False  # whether ``_register`` has attached the groups: once a process, however often it runs


def _register() -> None:
    """Attach every command group, each module's ``register(app, bench_app)``, once a process.

    ``run`` calls it, and a process that runs the command line more than once (the tests' console
    script in-process) attached every group again at each run: Typer builds each copy at each run,
    ~40 ms of CPU a copy on the dev host, so the n-th run in one process took n times as long."""
    global _registered
    if _registered:
        return
    from service.commands import ALL

    for module in ALL:
        module.register(app, bench_app)
    _unwrap_help(app)
    _registered = True


def _unwrap_help(group: typer.Typer) -> None:
    """Give every command of ``group`` (and of its subgroups) its help with each paragraph on one line.

    Typer's rich help keeps a docstring's line breaks past the first paragraph, so a paragraph wrapped
    at the source's width was wrapped again at the terminal's: ``predictor train --help`` on 80 columns
    showed a short line after every long one. One line a paragraph lets the terminal wrap it alone; a
    paragraph Click is told to keep (``\\b`` first) is left as written."""
    for info in group.registered_commands:
        text = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
        if text:
            info.help = "\n\n".join(
                p if p.startswith("\b") else " ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")
            )
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


# Typer ships its own copy of click, so its error classes are found through a public subclass.
_CLICK_ERROR: type[Exception] = next(k for k in typer.BadParameter.__mro__ if k.__name__ == "ClickException")
_USAGE_ERROR: type[Exception] = next(k for k in typer.BadParameter.__mro__ if k.__name__ == "UsageError")


def run() -> None:
    """Run the command ``sys.argv`` names, then exit with its status (``service.cli.main``).

    Typer answers a malformed command line (an unknown flag, a value of the wrong type, a missing
    argument) with a boxed usage message; every command's own checks answer with one line and exit
    status 2, as the README promises, so parse errors are turned into that line here too.
    """
    _register()
    try:
        code = app(prog_name=app.info.name, standalone_mode=False, obj=OWNS_PROCESS)
    except _CLICK_ERROR as error:
        sys.exit(_report(error))
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _report(error: Exception) -> int:
    """Print ``error`` as one line naming the command, and return its exit status."""
    status: int = getattr(error, "exit_code", 1)
    if type(error).__name__ == "NoArgsIsHelpError":  # Typer has printed the help already
        return status
    context = getattr(error, "ctx", None)
    where = context.command_path if context is not None else app.info.name
    message = " ".join(str(getattr(error, "format_message", error.__str__)()).split())
    hint = " (see --help)" if isinstance(error, _USAGE_ERROR) else ""
    exit_decided()  # a stop signal now leaves this status as it is (serve's handlers: ``service.cli``)
    typer.echo(f"{where}: {message}{hint}", err=True)
    return status
