"""Every command's ``--help`` lets the terminal wrap its paragraphs: none keeps the docstring's line
breaks, which Typer's rich help prints as they are, so a paragraph wrapped at the source's 110 columns
was wrapped again at the terminal's 80 (``predictor train --help``: a short line after every long one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner


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
