"""The ``rollout-scheduler`` command line: one root Typer app, one module per command group.

Each command group lives in its own module under ``service/commands/`` and is registered here, so the
root stays a table of contents. Command modules import their heavy dependencies lazily inside the
command functions, so ``rollout-scheduler --help`` stays fast.
"""

from __future__ import annotations

import typer

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


def _register() -> None:
    """Attach every command group; each module exposes ``register(app, bench_app)``."""
    from service.commands import ALL

    for module in ALL:
        module.register(app, bench_app)


def main() -> None:
    """Console-script entry point."""
    _register()
    app()


if __name__ == "__main__":
    main()
