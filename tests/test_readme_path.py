"""The README's "path of one batch" names a function for each step, and each one named exists.

A reader follows one batch through the code from that list; a rename that leaves it naming a function
that is gone sends them nowhere. Checked on the syntax tree: ``path::name`` or ``path::Class.method``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = [  # the developers' guide's path of one batch, which README.md's section lists
    "request",
    "validate",
    "predict",
    "plan",
    "publish",
    "claim",
    "run",
    "complete",
    "actuals",
    "retrain",
]
NAMED = re.compile(r"`([\w/]+\.py)::([\w.]+)`")


def _path_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## The path of one batch", 1)[1].split("\n## ", 1)[0]


def _summary() -> list[str]:
    """The steps of the one-line summary above the list: ``request -> validate -> ...``."""
    line = next(line for line in _path_section().splitlines() if line.startswith("request -> "))
    return line.split(" -> ")


def _step_lines() -> list[str]:
    return [line for line in _path_section().splitlines() if re.match(r"\d+\. \w+: ", line)]


def _defined(path: str, qualname: str) -> bool:
    """Whether ``qualname`` (a top-level name, or ``Class.member``) is defined in ``path``."""
    body = ast.parse((ROOT / path).read_text()).body
    for part in qualname.split("."):
        found = [
            n
            for n in body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
        ]
        if not found:
            return False
        body = found[0].body
    return True


def test_the_path_names_every_step_of_the_summary_in_order_one_line_each() -> None:
    steps = [line.split(": ", 1)[0].split(". ", 1)[1] for line in _step_lines()]
    assert steps == _summary() == STEPS


@pytest.mark.parametrize("line", _step_lines(), ids=lambda line: line.split(": ", 1)[0])
def test_every_function_the_path_names_exists(line: str) -> None:
    named = NAMED.findall(line)
    assert named, f"the step names no function: {line}"
    missing = [f"{path}::{name}" for path, name in named if not _defined(path, name)]
    assert not missing, f"named in README's path of one batch but not defined: {missing}"
