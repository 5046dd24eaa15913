"""The docs and the command line agree: every command line the docs show parses as far as its flags
go, and every command and option the CLI has appears in some command line of the docs. A command
quoted in prose without the program's name (README's ``bench service --url``) is one of those lines.
What ``--help`` says of a Redis URL is what the README's settings table says of ``REDIS_URL``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import typer
from typer.core import TyperGroup

from tests.service.cli_docs import (
    HELP,
    ROOT,
    CommandLine,
    command_lines,
    command_tree,
    doc_files,
    flags,
    resolve,
    top_commands,
)

Tree = dict[tuple[str, ...], list[frozenset[str]]]


def _doc_lines(tree: Tree) -> Iterator[CommandLine]:
    """Every command line of every doc, a bare one in prose (``trace push --retrain``) included."""
    for doc in doc_files():
        yield from command_lines(doc, top_commands(tree))


def _subcommands(tree: Tree, path: tuple[str, ...]) -> list[str]:
    return [other[-1] for other in tree if other[:-1] == path and len(other) == len(path) + 1]


def _shown(tree: Tree) -> dict[tuple[str, ...], set[str]]:
    """Each command path -> every flag some doc shows in a command line of it."""
    shown: dict[tuple[str, ...], set[str]] = {path: set() for path in tree}
    for line in _doc_lines(tree):
        shown[resolve(line.words, tree)].update(flags(line.words))
    return shown


def test_every_flag_a_doc_shows_for_a_command_is_one_that_command_takes(cli: typer.Typer) -> None:
    tree = command_tree(cli)
    wrong = []
    for line in _doc_lines(tree):
        path = resolve(line.words, tree)
        taken = {HELP}.union(*tree[path])
        wrong += [f"{line.where}: {' '.join(path)} {flag}" for flag in flags(line.words) if flag not in taken]
    assert wrong == []


def test_every_command_word_a_doc_shows_names_a_command(cli: typer.Typer) -> None:
    tree = command_tree(cli)
    wrong = []
    for line in _doc_lines(tree):
        path = resolve(line.words, tree)
        rest = line.words[len(path) :]
        if _subcommands(tree, path) and rest and rest[0] != "..." and not rest[0].startswith("-"):
            wrong.append(f"{line.where}: {' '.join((*path, rest[0]))}")
    assert wrong == []


def test_every_command_appears_in_a_command_line_of_the_docs(cli: typer.Typer) -> None:
    tree = command_tree(cli)
    named = {resolve(line.words, tree) for line in _doc_lines(tree)}
    assert [" ".join(path) for path in tree if path not in named and not _subcommands(tree, path)] == []


def test_every_option_of_every_command_appears_in_a_command_line_of_it(cli: typer.Typer) -> None:
    """An on/off pair (``--steal/--no-steal``) is one option: either spelling shows it."""
    tree = command_tree(cli)
    shown = _shown(tree)
    missing = [
        f"{' '.join(path)} {'/'.join(sorted(option))}"
        for path, options in tree.items()
        for option in options
        if not option & shown[path]
    ]
    assert missing == []


def test_a_command_quoted_without_the_program_name_is_read_as_a_command_line(cli: typer.Typer) -> None:
    """README names the clients of a running service as `bench service --url` and `trace push`, and
    predictors.md names `predictor eval`: those words are held to the CLI like any other line."""
    tree = command_tree(cli)
    read = {line.words for line in _doc_lines(tree)}
    assert {("bench", "service", "--url"), ("trace", "push"), ("predictor", "eval")} <= read


def test_a_lone_command_name_in_prose_is_a_word_not_a_command_line(cli: typer.Typer) -> None:
    """`serve` alone (README: "`serve` reads `REDIS_URL` too") names the command in a sentence: read
    as a command line, any mention would count as showing the command."""
    tree = command_tree(cli)
    readme = ROOT.joinpath("README.md").read_text().splitlines()
    number = next(n for n, text in enumerate(readme, 1) if "`serve` reads `REDIS_URL` too" in text)
    assert [line for line in _doc_lines(tree) if line.where == f"README.md:{number}"] == []


def _redis_url_helps(cli: typer.Typer) -> dict[str, str]:
    """Each command's ``--redis-url`` option -> its ``--help`` text."""
    helps: dict[str, str] = {}

    def walk(command: object, path: tuple[str, ...]) -> None:
        for param in getattr(command, "params", []):
            if param.param_type_name == "option" and "--redis-url" in param.opts:
                helps[" ".join(path)] = getattr(param, "help", None) or ""
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(cli), ())
    return helps


def test_a_redis_url_help_that_names_schemes_names_every_one_the_readme_does(cli: typer.Typer) -> None:
    """``serve --help`` said ``redis:// or rediss:// URL`` while the README's ``REDIS_URL`` row (and
    ``service/redis_conn.py``) takes ``unix://`` too: a user reading the help would not try a socket.
    A help that names no scheme (the sidecar's: "the service's") says nothing to hold."""
    readme = (ROOT / "README.md").read_text().splitlines()
    (row,) = [line for line in readme if line.startswith("| `REDIS_URL`")]
    documented = set(re.findall(r"`([a-z]+)://`", row))
    assert documented == {"redis", "rediss", "unix"}
    helps = _redis_url_helps(cli)
    assert "serve" in helps
    named = {command: set(re.findall(r"\b([a-z]+)://", text)) for command, text in helps.items()}
    assert {command: schemes for command, schemes in named.items() if schemes and schemes != documented} == {}
