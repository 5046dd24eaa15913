"""Reading ``rollout-scheduler`` command lines from the docs and the command tree from the CLI, so
tests can hold the two to each other: a flag the docs show must parse, a flag the CLI takes be shown.

A flag counts as shown for a command only inside a command line of that command (``rollout-scheduler
<command> ...``, in a code block or in backticks): prose also names other tools' flags (vLLM's
``--max-num-seqs``, ``kubectl``'s), which say nothing about ours. Prose quotes many commands without
the program's name (``trace push --retrain``, ``bench service --url``): a span that starts with one of
the CLI's commands and says more than its name is read as a command line too, so its words are held
to the CLI as well (until round 47 they were skipped, and a renamed flag there went unseen).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import typer
from typer.core import TyperGroup

from tests.line_index import Lines

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "rollout-scheduler"
HELP = "--help"  # click gives every command and group one
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# .venv/bin/rollout-scheduler too, not kubectl's deployment/rollout-scheduler nor an image tag
_CALL = re.compile(rf"(?:^|(?<=\s)|(?<=bin/))({PROGRAM}(?:\s.*)?)$")
_COMMENT = re.compile(r"\s#.*$")
_SPAN = re.compile(r"`([^`]+)`")


def doc_files() -> list[Path]:
    """The README and every page under docs/: where a user looks for a command."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True, slots=True)
class CommandLine:
    """One ``rollout-scheduler ...`` line a doc shows: where it starts, and its words after the name."""

    where: str  # "docs/sidecar.md:9"
    words: tuple[str, ...]


def command_tree(app: typer.Typer) -> dict[tuple[str, ...], list[frozenset[str]]]:
    """Every command and group of ``app`` by its path (the root is ``()``) -> its options, each as the
    set of its spellings (``--steal`` and ``--no-steal`` are one option)."""
    tree: dict[tuple[str, ...], list[frozenset[str]]] = {}

    def walk(command: object, path: tuple[str, ...]) -> None:
        params = getattr(command, "params", [])
        tree[path] = [frozenset(p.opts + p.secondary_opts) for p in params if p.param_type_name == "option"]
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return tree


def top_commands(tree: dict[tuple[str, ...], list[frozenset[str]]]) -> frozenset[str]:
    """The names of the CLI's commands and groups directly under the program (``serve``, ``trace``)."""
    return frozenset(path[0] for path in tree if len(path) == 1)


def command_lines(path: Path, commands: Collection[str] = ()) -> Iterator[CommandLine]:
    """The command lines of one doc: in code blocks (a line ending in ``\\`` or followed by indented
    lines runs on; ``# comments`` dropped) and in backticks in the prose, where one of ``commands``
    starting a span of two words or more (``predictor eval``) stands for the program's name and it."""
    text = path.read_text()
    name = str(path.relative_to(ROOT))
    lines = Lines(text)
    for block in _FENCE.finditer(text):
        first = lines.of(block.start())
        yield from _block_lines(block.group().splitlines(), name, first)
    prose = _FENCE.sub(lambda block: "\n" * block.group().count("\n"), text)
    lines = Lines(prose)
    for span in _SPAN.finditer(prose):
        words = span.group(1).split()
        where = f"{name}:{lines.of(span.start())}"
        if words and words[0] == PROGRAM:
            yield CommandLine(where, tuple(words[1:]))
        elif len(words) > 1 and words[0] in commands:
            yield CommandLine(where, tuple(words))


def _block_lines(lines: list[str], name: str, first: int) -> Iterator[CommandLine]:
    """The command lines of one fenced block whose first line is line ``first`` of ``name``."""
    for number, line in enumerate(lines):
        match = _CALL.search(_COMMENT.sub("", line))
        if match is None:
            continue
        words = match.group(1).rstrip("\\").split()
        following = number + 1
        while following < len(lines) and _runs_on(lines[following - 1], lines[following]):
            words += _COMMENT.sub("", lines[following]).rstrip("\\").split()
            following += 1
        yield CommandLine(f"{name}:{first + number}", tuple(words[1:]))


def _runs_on(line: str, following: str) -> bool:
    """Whether ``following`` continues the command of ``line``: after a ``\\``, or indented."""
    if _CALL.search(_COMMENT.sub("", following)) is not None:
        return False
    return _COMMENT.sub("", line).rstrip().endswith("\\") or following[:1] in (" ", "\t")


def resolve(words: tuple[str, ...], tree: dict[tuple[str, ...], list[frozenset[str]]]) -> tuple[str, ...]:
    """The longest command path ``words`` start with."""
    path: tuple[str, ...] = ()
    for word in words:
        if (*path, word) not in tree:
            break
        path = (*path, word)
    return path


def flags(words: tuple[str, ...]) -> list[str]:
    """The ``--flags`` among ``words`` (``--steal/--no-steal`` is two)."""
    return _FLAG.findall(" ".join(words))
