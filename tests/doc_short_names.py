"""The docs' short names read from their prose: each ``module.name`` span whose first part is the
file name of a module of ours, and each bare ``name.py``, with the ``file:line`` it is written on.

The short-references test checks each against the code; the line-index test checks each finding's
line. Both read the docs through these, rather than through one test module's names, so a change to
what counts as a short name reaches both.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import cache
from pathlib import Path

from tests.doc_refs import PACKAGES, ROOT
from tests.line_index import Lines

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_SHORT = re.compile(r"^([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)(?:\.\w+)*(?:\(\))?$")
_EXTENSIONS = frozenset({"py", "json", "model", "md", "csv", "yaml", "txt", "lua", "sh", "toml", "gz"})
# First parts that name an API body's or an answer's fields, not our modules of the same file name,
# each with why. Keep it short.
NOT_MODULES: dict[str, str] = {
    "sampling": "a request's `sampling.n`, `sampling.extra`: fields of the POST /schedule body",
    "batch": "`batch.items`: the POST /schedule body's list of prompts",
    "progress": "`progress.cancelled`: a field of the client's StepResults.progress",
}
_BARE_FILE = re.compile(r"^[\w-]+\.py$")


@cache
def modules_by_name() -> dict[str, list[Path]]:
    """File name (no suffix) -> every module of the packages with that name."""
    found: dict[str, list[Path]] = defaultdict(list)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py":
                found[path.stem].append(path)
    return found


def short_references(path: Path) -> list[tuple[str, str, str]]:
    """``(where, module, name)`` for each ``module.name`` span of one doc's prose."""
    text = _FENCE.sub(lambda block: "\n" * block.group().count("\n"), path.read_text())
    lines = Lines(text)
    found = []
    for span in _SPAN.finditer(text):
        match = _SHORT.match(span.group(1).strip())
        if match is None or match.group(2) in _EXTENSIONS:
            continue
        module, name = match.groups()
        if module in modules_by_name() and module not in NOT_MODULES:
            where = f"{path.relative_to(ROOT)}:{lines.of(span.start())}"
            found.append((where, module, name))
    return found


def bare_files(path: Path) -> list[tuple[str, str]]:
    """``(where, name)`` for each span of one doc's prose that is a bare ``name.py``."""
    text = _FENCE.sub(lambda block: "\n" * block.group().count("\n"), path.read_text())
    lines = Lines(text)
    return [
        (f"{path.relative_to(ROOT)}:{lines.of(span.start())}", span.group(1).strip())
        for span in _SPAN.finditer(text)
        if _BARE_FILE.match(span.group(1).strip())
    ]
