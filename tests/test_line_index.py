"""``Lines`` numbers every offset as counting the newlines before it does (what the docs tests did
before, quadratically), and every docs helper that numbers its findings with it names the line each
is written on: a finding's ``file:line`` stays where a reader finds it."""

from __future__ import annotations

from functools import cache

import typer

from tests.doc_refs import ROOT, doc_files, doc_references
from tests.doc_short_names import bare_files, short_references
from tests.line_index import Lines
from tests.service.cli_docs import PROGRAM, command_lines, command_tree, top_commands


def test_every_offset_is_on_the_line_the_newlines_before_it_say() -> None:
    for text in ("", "\n", "one", "one\n", "\n\nthree\n```\nfive\n```\n\nlast line", "a\r\nb\n"):
        lines = Lines(text)
        assert [lines.of(at) for at in range(len(text) + 1)] == [
            text.count("\n", 0, at) + 1 for at in range(len(text) + 1)
        ], text


@cache
def _lines(name: str) -> list[str]:
    return (ROOT / name).read_text().splitlines()


def _on_its_line(where: str, text: str) -> bool:
    """Whether ``text`` is written on the line ``where`` (``docs/sidecar.md:9``) names."""
    name, number = where.rsplit(":", 1)
    return text in _lines(name)[int(number) - 1]


def test_every_finding_the_docs_helpers_read_is_on_the_line_they_name_it_by(cli: typer.Typer) -> None:
    """Each helper numbers its findings through ``Lines`` over the text it matched in (a doc, or its
    prose with the code blocks blanked): one numbering the prose's offsets on the doc's lines, or off
    by one, sends a reader of a failure to the wrong line, and no check of the finding itself fails."""
    commands = top_commands(command_tree(cli))
    found: list[tuple[str, str]] = []  # (where, what is written there)
    for doc in doc_files():
        found += [(ref.where, ref.text) for ref in doc_references(doc)]
        found += [(where, f"{module}.{name}") for where, module, name in short_references(doc)]
        found += bare_files(doc)
        found += [
            (line.where, line.words[0] if line.words else PROGRAM) for line in command_lines(doc, commands)
        ]
    misplaced = [finding for finding in found if not _on_its_line(*finding)]
    assert len(found) > 2_000
    assert misplaced == []
