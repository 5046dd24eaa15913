"""Every command's ``--help`` lets the terminal wrap its paragraphs: none keeps the docstring's line
breaks, which Typer's rich help prints as they are, so a paragraph wrapped at the source's 110 columns
was wrapped again at the terminal's 80 (``predictor train --help``: a short line after every long one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from service.cli_app import _unwrap_help


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each command and group under ``command``, with the words that name it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_help_paragraph_keeps_a_source_line_break(cli: typer.Typer) -> None:
    broken = [
        " ".join(path)
        for path, command in _commands(typer.main.get_command(cli))
        for paragraph in (command.help or "").split("\n\n")[1:]
        if "\n" in paragraph.strip() and not paragraph.startswith("\b")
    ]
    assert broken == []


def test_predictor_train_help_wraps_its_paragraph_at_the_terminal(cli: typer.Typer) -> None:
    shown = CliRunner().invoke(cli, ["predictor", "train", "--help"], env={"COLUMNS": "80"}).output
    lines = [line.strip() for line in shown.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("With two or more steps"))
    paragraph = lines[start : lines.index("", start)]
    assert all(len(line) > 50 for line in paragraph[:-1]), paragraph  # no short line between long ones


def test_a_command_given_its_help_shows_that_help_not_its_functions_docstring(cli: typer.Typer) -> None:
    """``replay``, ``serve`` and others are registered with ``help=``: that text is what is unwrapped
    and shown, the function's own docstring (written for the code's readers) is not."""
    shown = " ".join(CliRunner().invoke(cli, ["replay", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "Policies: round_robin, least_loaded, lpt, cpsat, oracle." in shown


def test_a_paragraph_click_is_told_to_keep_keeps_its_lines() -> None:
    """A paragraph that starts with ``\\b`` (Click's mark for a block not to rewrap: a list, a table)
    keeps its line breaks; the paragraphs around it are unwrapped."""
    app = typer.Typer()

    @app.command()
    def listed() -> None:
        """One line.

        A paragraph wrapped
        at the source's width.

        \b
        first row
        second row
        """

    _unwrap_help(app)
    help_text = app.registered_commands[0].help
    assert help_text == "One line.\n\nA paragraph wrapped at the source's width.\n\n\b\nfirst row\nsecond row"
