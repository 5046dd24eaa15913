"""Check a container's command line against the real ``rollout-scheduler`` CLI, without running it.

A manifest that passes a flag the CLI does not have fails only when a pod starts, far from the change
that broke it. Here each command line is parsed by the same command tree the console script builds, so
an unknown or misspelt option, a missing required one or a bad value fails the test suite instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException


class CommandLineError(ValueError):
    """The command line would be refused by ``rollout-scheduler``."""


@lru_cache(maxsize=1)
def root_command() -> Any:
    """The CLI as the console script sees it, with every command group registered (once)."""
    from service import cli_app as cli

    cli._register()
    return typer.main.get_command(cli.app)


def parse_cli(argv: Sequence[str]) -> typer.Context:
    """Parse ``rollout-scheduler <argv>`` down to its leaf command and return that command's context.

    Nothing is invoked: ``make_context`` only parses and converts, as the console script would before
    calling the command. Raises ``CommandLineError`` naming what is wrong.
    """
    command = root_command()
    args, name, parent = list(argv), "rollout-scheduler", None
    try:
        while isinstance(command, TyperGroup):
            ctx = typer.Context(command, info_name=name, parent=parent)
            if not args:
                raise CommandLineError(f"{name}: no command given")
            name, args = args[0], args[1:]
            sub = command.get_command(ctx, name)
            if sub is None:
                raise CommandLineError(f"{ctx.command_path}: no such command {name!r}")
            command, parent = sub, ctx
        context: typer.Context = command.make_context(name, args, parent=parent)
    except TyperException as exc:
        raise CommandLineError(f"{' '.join(argv)}: {exc}") from exc
    return context


class Option(Protocol):
    """A CLI parameter as click builds it: the variables it falls back to, if any."""

    @property
    def envvar(self) -> str | Sequence[str] | None:
        """The variable(s) the parameter reads when its flag is not given."""


def option_envvars(param: Option) -> set[str]:
    """The environment variables ``param`` reads when its flag is not given."""
    envvar = param.envvar
    if envvar is None:
        return set()
    return {envvar} if isinstance(envvar, str) else set(envvar)
