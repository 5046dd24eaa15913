"""Every section of a docs/ page that the docs and docstrings send a reader to still exists.

README.md, docs/*.md and the modules of scheduler/, predictors/, service/ and tests/ point into the
pages by name (``docs/delivery.md, "Pins and prefix affinity", "Items a worker cannot hold"``), by
step (``docs/solver.md, step 7``) or, into the record, by section and entry (``docs/experiments.md,
Solver, "cpsat: the second round"``). The pages are rewritten as the code changes (2026-12-05: the
history of docs/solver.md and docs/simulator.md moved to docs/experiments.md), and a name that is gone
sends the reader nowhere: ``service/bench/report.py`` named a section "Batches that run at once" that
docs/solver.md never had, and five places named ``docs/api.md, "engine"``, a field inside a paragraph.

The rule the pages follow, so that a reader finds the place by eye:

- a quoted name begins one of the page's headings or a bold or italic paragraph lead (``**Cost.**``);
  a heading of docs/experiments.md is read without its ``(moved from docs/solver.md, ...):`` note, and
  a top-level bullet of that page (``- Tail migration: ...``) counts as a lead, since the record keeps
  most of its entries as bullets;
- an unquoted section name before the quoted one (``Solver``) begins one of the page's headings;
- a step is one of the page's numbered bold steps (``7. **Robust choice.**``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.doc_refs import ROOT, doc_files, source_files

DOCS = ROOT / "docs"
HERE = Path(__file__).resolve()
RECORD = "experiments"  # the page whose bullets are entries too
# ``docs/solver.md, step 3, "The lowest band, shifted"``, ``docs/solver.md, steps 7-9``,
# ``docs/experiments.md, Solver, "cpsat: why the grid"``, ``docs/delivery.md "A", "B"``: the page, its
# steps, one unquoted section name when a quoted name follows, and the quoted names right after.
_REFERENCE = re.compile(
    r"docs/([\w-]+)\.md,?\s+"
    r"(?:steps?\s+(\d+)(?:\s*-\s*(\d+))?,?\s*)?"
    r'(?:([A-Z][\w ()-]*?),\s+(?="))?'
    r'((?:"[^"]+",?\s*(?:and\s+)?)*)'
)
_QUOTED = re.compile(r'"([^"]+)"')
_CONTINUATION = re.compile(r"\n[ \t]*(?:#+[ \t]*)?")  # a wrapped line, in prose or in a comment
_HEADING = re.compile(r"^#+\s+(.+)$", re.MULTILINE)
_LEAD = re.compile(r"\*\*([^*\n]+)\*\*|(?<![*\w])\*([^*\n]+)\*(?!\*)")
_BULLET = re.compile(r"^- (.+)$", re.MULTILINE)
_MOVED = re.compile(r"^\(moved from [^)]*\):\s*")
_STEP = re.compile(r"^\s*(\d+)\. \*\*", re.MULTILINE)
Reference = tuple[str, str, int | None, int | None, str | None, tuple[str, ...]]
"""Where, page, first step, last step, section, names."""


def _plain(text: str) -> str:
    return _MOVED.sub("", re.sub(r"[`*]", "", text).strip()).rstrip(".,:;").lower()


@cache
def _headings(page: str) -> tuple[str, ...]:
    return tuple(_plain(heading) for heading in _HEADING.findall((DOCS / f"{page}.md").read_text()))


@cache
def _titles(page: str) -> tuple[str, ...]:
    """The page's headings and paragraph leads (and the record's bullets), lower case, no markup."""
    text = (DOCS / f"{page}.md").read_text()
    leads = [_plain(next(group for group in match.groups() if group)) for match in _LEAD.finditer(text)]
    bullets = [_plain(bullet) for bullet in _BULLET.findall(text)] if page == RECORD else []
    return (*_headings(page), *leads, *bullets)


@cache
def _steps(page: str) -> frozenset[int]:
    return frozenset(int(number) for number in _STEP.findall((DOCS / f"{page}.md").read_text()))


@cache
def _references() -> tuple[Reference, ...]:
    found: list[Reference] = []
    for path in (*doc_files(), *source_files()):
        if path == HERE:  # its docstring's names are examples
            continue
        text = _CONTINUATION.sub(" ", path.read_text())
        for match in _REFERENCE.finditer(text):
            page, first, last, section, names = match.groups()
            found.append(
                (
                    str(path.relative_to(ROOT)),
                    page,
                    int(first) if first else None,
                    int(last) if last else None,
                    section,
                    tuple(_QUOTED.findall(names)),
                )
            )
    return tuple(found)


def _broken(references: tuple[Reference, ...]) -> list[str]:
    broken = []
    for where, page, first, last, section, names in references:
        if not (DOCS / f"{page}.md").exists():
            broken.append(f"{where}: there is no docs/{page}.md")
            continue
        if section is not None and not any(h.startswith(_plain(section)) for h in _headings(page)):
            broken.append(f'{where}: section "{section}" begins no heading of docs/{page}.md')
        for name in names:
            if not any(title.startswith(_plain(name)) for title in _titles(page)):
                broken.append(f'{where}: "{name}" begins no heading or paragraph lead of docs/{page}.md')
        for step in (first, last):
            if step is not None and step not in _steps(page):
                broken.append(f"{where}: docs/{page}.md has no step {step}")
    return broken


def test_every_section_the_docs_and_docstrings_name_is_on_its_page() -> None:
    names = [page for _, page, *_, names in _references() if names]
    assert len(names) > 60
    assert {"solver", "simulator", "delivery", "experiments", "api"} <= set(names)
    assert not _broken(_references())


def test_every_step_they_name_is_one_of_cpsats_steps() -> None:
    assert sum(first is not None for _, _, first, *_ in _references()) > 5
    assert _steps("solver") >= set(range(1, 11))


def test_a_name_the_page_never_had_is_caught() -> None:
    """The check can fail: report.py's reference until 2026-12-05, a field named as if a section, a
    step past the last, an entry under the wrong section."""
    assert _broken(
        (
            ("report.py", "solver", None, None, None, ("Batches that run at once",)),
            ("engines.py", "api", None, None, None, ("engine", "idempotency")),
            ("x", "solver", 11, None, None, ()),
            ("y", "experiments", None, None, "Solvers and more", ("cpsat: why the grid",)),
        )
    ) == [
        'report.py: "Batches that run at once" begins no heading or paragraph lead of docs/solver.md',
        'engines.py: "idempotency" begins no heading or paragraph lead of docs/api.md',
        "x: docs/solver.md has no step 11",
        'y: section "Solvers and more" begins no heading of docs/experiments.md',
    ]
    assert not _broken(
        (
            ("x", "solver", 3, None, None, ("The lowest band, shifted",)),
            ("y", "solver", 7, 9, None, ("Determinism",)),
            ("z", "experiments", None, None, "Solver", ("cpsat: why the grid",)),
            ("r", "experiments", None, None, None, ("Tail migration",)),
        )
    )


# ``docs/experiments.md, budget49``, ``docs/experiments.md, deadline48, deadline49``: the record's
# entries named by the helper that wrote them (a lower-case name with a digit in it).
_BY_HELPER = re.compile(r"docs/experiments\.md[,;]\s+((?:[a-z][a-z-]*\d[a-z0-9]*(?:,\s*|\s+and\s+)?)+)")
_HELPER_NAME = re.compile(r"[a-z][a-z-]*\d[a-z0-9]*")
# How the record names an entry's helper: ``(helper budget49, 2026-12-05)``, ``helper "quant4"``,
# ``(helpers a1 and b2, ...)``.
_SIGNED = re.compile(r'\bhelpers?\s+"?([a-z][\w-]*(?:(?:,\s*|\s+and\s+)[a-z][\w-]*)*)')


@cache
def _helpers() -> frozenset[str]:
    """Every helper the record names as the writer of an entry."""
    signed = _SIGNED.findall(_CONTINUATION.sub(" ", (DOCS / f"{RECORD}.md").read_text()))
    return frozenset(name for names in signed for name in re.split(r",\s*|\s+and\s+", names))


def _unsigned(sources: tuple[tuple[str, str], ...]) -> list[str]:
    """``where: helper`` for each entry named by a helper that signed none."""
    return [
        f"{where}: no entry of docs/{RECORD}.md is signed by helper {name}"
        for where, text in sources
        for match in _BY_HELPER.finditer(_CONTINUATION.sub(" ", text))
        for name in _HELPER_NAME.findall(match.group(1))
        if name not in _helpers()
    ]


def test_every_entry_the_docs_and_docstrings_name_by_its_helper_is_in_the_record() -> None:
    """A round's docs send the reader to the record by the helper that measured a claim
    (``docs/experiments.md, review49a``): that helper signed an entry there."""
    sources = tuple(
        (str(path.relative_to(ROOT)), path.read_text())
        for path in (*doc_files(), *source_files())
        if path != HERE
    )
    assert sum(len(_BY_HELPER.findall(text)) for _, text in sources) > 20
    assert _unsigned(sources) == []


def test_an_entry_named_by_a_helper_who_signed_none_is_caught() -> None:
    assert _unsigned((("a.md", "(docs/experiments.md, budget49, review49z)"),)) == [
        f"a.md: no entry of docs/{RECORD}.md is signed by helper review49z"
    ]
    assert _unsigned((("b.md", "docs/experiments.md, deadline48 and deadline49"),)) == []
