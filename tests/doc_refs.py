"""Finding the references to code that the docs and docstrings make, and whether each still holds.

A reference is a repository path (``scheduler/finish.py``, ``tests/deploy/``, ``service/replay/*.py``)
or a dotted Python name that starts with one of our packages (``scheduler.planner.plan``,
``service.problems.table.ProblemBody``), written in backticks: single ones in the Markdown docs, double
ones (reStructuredText) in the docstrings and comments of the packages and the tests. Modules are
split often (the sidecar's runner gave its items in flight to ``service/sidecar/in_flight.py``, the
client its wire to ``service/client/wire.py``); prose that still names the old home of a moved
function sends a reader to nothing, and nothing else notices.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.line_index import Lines

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "predictors", "service")
TOP_DIRS = (*PACKAGES, "tests", "deploy")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_MD_SPAN = re.compile(r"`([^`\n]+)`")
_RST_SPAN = re.compile(r"``(.+?)``", re.DOTALL)
# A path starts a word (not ``/tmp/service/x`` nor ``src/scheduler/``) and may end in ``::name``
# (pytest's node id ``::test_x``, or README's path of a batch ``::Class.method``), whose every part must
# be defined (``def`` or ``class``) in the file; a glob (``*``) must match something.
_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP_DIRS)})/[\w./*-]*(?:::\w+(?:\.\w+)*)?)")
_DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")


@dataclass(frozen=True, slots=True)
class Reference:
    """One reference to code, and where it was written (``docs/sidecar.md:9``)."""

    where: str
    text: str


def doc_files() -> list[Path]:
    """The README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def source_files() -> list[Path]:
    """Every module of the three packages and of the tests (whose docstrings name what they hold
    to what)."""
    return sorted(path for top in (*PACKAGES, "tests") for path in (ROOT / top).rglob("*.py"))


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def references_in(text: str, where: str, first_line: int = 1) -> Iterator[Reference]:
    """The paths and dotted names inside one piece of backticked text, each at its own line."""
    for pattern in (_PATH, _DOTTED):
        for match in pattern.finditer(text):
            line = first_line + text.count("\n", 0, match.start())
            yield Reference(f"{where}:{line}", match.group(1))


def doc_references(path: Path) -> Iterator[Reference]:
    """The references in one Markdown doc: in its backticked spans and its fenced code blocks (a
    shell line there runs ``python -m service.cli`` or reads ``deploy/compose.yaml`` as surely)."""
    text = path.read_text()
    name = str(path.relative_to(ROOT))
    lines = Lines(text)
    for block in _FENCE.finditer(text):
        yield from references_in(block.group(), name, lines.of(block.start()))
    prose = _FENCE.sub(lambda block: "\n" * block.group().count("\n"), text)
    lines = Lines(prose)
    for span in _MD_SPAN.finditer(prose):
        yield from references_in(span.group(1), name, lines.of(span.start(1)))


def _docstrings(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every docstring of a module, its classes and its functions."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0].value if node.body and isinstance(node.body[0], ast.Expr) else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield first


def _comments(source: str) -> Iterator[tuple[int, str]]:
    """Every ``# comment`` of a module with its line. From the first ``#`` of a line, not by the
    tokenizer (a third of the test's time): a ``#`` inside a string starts a "comment" here too,
    which only means the rest of that line is read for references as well."""
    for number, line in enumerate(source.splitlines(), start=1):
        if (start := line.find("#")) >= 0:
            yield number, line[start:]


def source_references(path: Path) -> Iterator[Reference]:
    """The references in the double-backticked spans of one module's docstrings and comments.

    A docstring's line is counted from its first line, so a reference in a literal whose escapes
    (``\\n``) differ from its source text may be reported a line or two off: still findable."""
    source = path.read_text()
    name = str(path.relative_to(ROOT))
    pieces = [(node.lineno, str(node.value)) for node in _docstrings(ast.parse(source))]
    pieces += list(_comments(source))
    for first, text in pieces:
        for span in _RST_SPAN.finditer(text):
            yield from references_in(span.group(1), name, first + _line(text, span.start(1)) - 1)


def path_problem(text: str) -> str | None:
    """Why a path reference fails (nothing there, a glob matching nothing, a name not defined in it),
    or None."""
    path, _, name = text.partition("::")
    path = path.rstrip(".")
    if "*" in path:
        return None if any(ROOT.glob(path)) else "no file matches"
    if not (ROOT / path).exists():
        return "no such file or folder"
    source = (ROOT / path).read_text() if name else ""
    missing = [
        part for part in name.split(".") if name and not re.search(rf"\b(?:def|class) {part}\b", source)
    ]
    return f"no {'.'.join(missing)} defined in it" if missing else None


def name_problem(text: str) -> str | None:
    """Why a dotted name fails to resolve, or None: the longest prefix that imports as a module,
    then each further part as an attribute (``module.Class.method``)."""
    parts = text.split(".")
    module = None
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if not f"{name}.".startswith(f"{error.name}."):
                raise  # the module exists but imports something missing: not the doc's fault
            continue
        break
    if module is None:
        return "no such module"
    found: object = module
    for part in parts[end:]:
        if not hasattr(found, part):
            return f"{'.'.join(parts[:end])} has no {part}"
        found = getattr(found, part)
        end += 1
    return None


def problem(reference: Reference) -> str | None:
    """Why one reference no longer holds, or None."""
    if "/" in reference.text:
        return path_problem(reference.text)
    return name_problem(reference.text)
