"""Every section of docs/solver.md that the docs and docstrings send a reader to still exists.

README.md, docs/*.md and the modules of scheduler/, predictors/, service/ and tests/ point into the
planner's design page by name (``docs/solver.md, "Batches too big for a round"``) or by step
(``docs/solver.md, step 7``). The page is rewritten as the planner changes (2026-12-05: its history
moved to docs/experiments.md), and a reference to a heading that is gone sends the reader nowhere:
``service/bench/report.py`` named a section "Batches that run at once" that the page never had. A
name must begin one of the page's headings or of its bold or italic paragraph leads; a step must be
one of the numbered steps of its `cpsat` section.
"""

from __future__ import annotations

import re
from functools import cache

from tests.doc_refs import ROOT, doc_files, source_files

PAGE = ROOT / "docs" / "solver.md"
# ``docs/solver.md, step 3, "The lowest band, shifted"``, ``docs/solver.md, steps 7-9``,
# ``docs/solver.md "Speeds within a kind"``: the steps and the quoted name right after the path.
_REFERENCE = re.compile(r'docs/solver\.md,?\s+(?:steps?\s+(\d+)(?:\s*-\s*(\d+))?,?\s*)?(?:"([^"]+)")?')
_CONTINUATION = re.compile(r"\n[ \t]*(?:#+[ \t]*)?")  # a wrapped line, in prose or in a comment
_LEAD = re.compile(r"^#+\s+(.+)$|\*\*([^*\n]+)\*\*|(?<![*\w])\*([^*\n]+)\*(?!\*)", re.MULTILINE)
_STEP = re.compile(r"^\s*(\d+)\. \*\*", re.MULTILINE)
Reference = tuple[str, int | None, int | None, str | None]  # where, first step, last step, name


def _plain(text: str) -> str:
    return re.sub(r"[`*]", "", text).strip().rstrip(".,:;").lower()


@cache
def _titles() -> tuple[str, ...]:
    """The page's headings and paragraph leads, lower case, without markup."""
    return tuple(
        _plain(next(group for group in match.groups() if group)) for match in _LEAD.finditer(PAGE.read_text())
    )


@cache
def _steps() -> frozenset[int]:
    return frozenset(int(number) for number in _STEP.findall(PAGE.read_text()))


@cache
def _references() -> tuple[Reference, ...]:
    """(where, first step, last step, name) for every reference into the page."""
    found: list[Reference] = []
    for path in (*doc_files(), *source_files()):
        text = _CONTINUATION.sub(" ", path.read_text())
        for match in _REFERENCE.finditer(text):
            first, last, name = match.groups()
            found.append(
                (
                    str(path.relative_to(ROOT)),
                    int(first) if first else None,
                    int(last) if last else None,
                    name,
                )
            )
    return tuple(found)


def _broken(references: tuple[Reference, ...]) -> list[str]:
    broken = []
    for where, first, last, name in references:
        if name is not None and not any(title.startswith(_plain(name)) for title in _titles()):
            broken.append(f'{where}: "{name}" begins no heading or paragraph lead of docs/solver.md')
        for step in (first, last):
            if step is not None and step not in _steps():
                broken.append(f"{where}: docs/solver.md has no step {step}")
    return broken


def test_every_section_the_docs_and_docstrings_name_is_on_the_page() -> None:
    assert sum(name is not None for *_, name in _references()) > 10
    assert not _broken(_references())


def test_every_step_they_name_is_one_of_cpsats_steps() -> None:
    assert sum(first is not None for _, first, _, _ in _references()) > 5
    assert _steps() >= set(range(1, 11))


def test_a_name_the_page_never_had_is_caught() -> None:
    """The check can fail: report.py's reference until 2026-12-05, and a step past the last."""
    assert _broken((("report.py", None, None, "Batches that run at once"),)) == [
        'report.py: "Batches that run at once" begins no heading or paragraph lead of docs/solver.md'
    ]
    assert _broken((("x", 11, None, None),)) == ["x: docs/solver.md has no step 11"]
    assert not _broken((("x", 3, None, "The lowest band, shifted"), ("y", 7, 9, "Determinism")))
