"""The README's "path of one batch" names a function for each step, each one named exists, and each
``a -> b`` it gives is a call ``a`` makes.

A reader follows one batch through the code from that list; a rename that leaves it naming a function
that is gone sends them nowhere, and a hop to a function that exists but is not the one called (the
section named ``ModelService.sync`` where ``report_actuals`` calls ``sync_stored``) sends them to the
wrong place. Checked on the syntax tree: ``path::name`` or ``path::Class.method``.
"""

from __future__ import annotations

import ast
import re
from itertools import pairwise
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


# A list of functions the path names together: `a`, `b`, else `c`, or `d` (backticked ``path::name``).
_REF = r"`[\w/]+\.py::[\w.]+`"
_LIST = re.compile(rf"{_REF}(?:(?:, else |, | or ){_REF})*")
_ASIDE = re.compile(r"\([^()]*\)")  # a parenthesis: where a call comes from, what it writes; no hop
REACH_DEPTH = 4  # calls followed through the module's own private helpers, which the path leaves out


def _hops() -> list[tuple[list[tuple[str, str]], list[tuple[str, str]]]]:
    """Each ``sources -> targets`` of the section: two lists of functions with only `` -> ``
    between them, asides in parentheses left out."""
    hops = []
    for line in _step_lines():
        text = _ASIDE.sub("", line)
        lists = list(_LIST.finditer(text))
        for before, after in pairwise(lists):
            if text[before.end() : after.start()] == " -> ":
                hops.append((NAMED.findall(before.group()), NAMED.findall(after.group())))
    return hops


def _node(path: str, qualname: str) -> ast.AST:
    body = ast.parse((ROOT / path).read_text()).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            n
            for n in body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
        )
        body = node.body
    assert node is not None
    return node


def _named_in(node: ast.AST) -> set[str]:
    """Every name and attribute ``node`` reads: what it calls, or hands on to be called (``partial``)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _reaches(path: str, qualname: str, target: str) -> bool:
    """Whether ``target`` is named by the function, or by a private helper of its module that it
    reaches through such helpers (``REACH_DEPTH`` deep): the path skips those helpers, not a module."""
    helpers: dict[str, list[ast.AST]] = {}
    for n in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("_"):
            helpers.setdefault(n.name, []).append(n)
    frontier, seen = [_node(path, qualname)], set[str]()
    for _ in range(REACH_DEPTH):
        named = set().union(*(_named_in(n) for n in frontier))
        if target in named:
            return True
        fresh = (named & helpers.keys()) - seen
        seen |= fresh
        frontier = [n for name in fresh for n in helpers[name]]
    return False


def test_the_path_has_hops_to_check() -> None:
    assert len(_hops()) >= 10


@pytest.mark.parametrize("hop", _hops(), ids=lambda hop: " -> ".join(name for _, name in hop[1]))
def test_each_hop_is_a_call_the_function_before_it_makes(
    hop: tuple[list[tuple[str, str]], list[tuple[str, str]]],
) -> None:
    """``a -> b`` says a reader who opens ``a`` finds ``b`` called there: a name that exists but is
    not what ``a`` calls (``ModelService.sync`` for the ``sync_stored`` that ``report_actuals``
    calls) sends the reader to the wrong function."""
    sources, targets = hop
    astray = [
        f"{path}::{name}"
        for path, name in targets
        if not any(_reaches(source, qual, name.split(".")[-1]) for source, qual in sources)
    ]
    assert not astray, f"named after {sources} in README's path, but not called there: {astray}"
