"""Every constant of ours the user-facing docs give with its value (`` `FOLD_WAIT_S` (50 ms)``,
`` `CLEAR` (8)``, `` `RANK_TOLERANCE`, 1%``) has that value in the code.

The docs name a tuned constant beside its value so a reader knows both what to change and what it is
now; tests/test_doc_short_refs.py holds the name to the code, nothing held the value. Round 50 moved
several (the exit guard's status 0 -> 70, its last acts' 1 s, the follower's 50 ms fold wait, the
bound's bisection steps): a value changed in the code and not in the docs reads as current and is not.

A span counts where a backticked upper-case name is followed by a number (in parentheses or after a
comma) with at most a unit: ``ms`` and ``h`` are read against a constant in seconds, ``%`` against a
fraction, anything else as written. The name must be a module-level constant of ours whose value is a
number (a literal or arithmetic on literals); a name two modules give different values is skipped, as
the doc cannot say which it means, unless the doc names its module by file name (`` `store_sweep.STALE_S`
(1 h)``, where ``service/sidecar/health.py``'s ``STALE_S`` is 30 s): then it is read against that
module's. docs/experiments.md is left out: a dated log, which gives the values as they were then.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import defaultdict
from collections.abc import Callable
from functools import cache

from tests.doc_refs import ROOT, doc_files

_NAME = r"(?:[a-z_][a-z0-9_]*\.)?[A-Z][A-Z0-9_]{2,}"  # ``FOLD_WAIT_S``, or ``store_sweep.STALE_S``
_GIVEN = re.compile(rf"`({_NAME})`,?\s\(?(\d[\d,]*(?:\.\d+)?)(?: ?(ms|h|%)(?![\w]))?")
_SCALE = {"ms": 1e-3, "h": 3600.0, "%": 0.01}
_OPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
LOGS = frozenset({"docs/experiments.md"})


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal or of arithmetic on such literals (``3 * 3600``), else None."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _number(node.left), _number(node.right)
        return None if left is None or right is None else _OPS[type(node.op)](left, right)
    return None


def _assigned(module: ast.Module) -> list[tuple[str, float | None]]:
    """Each name a module's top level assigns, with its number where it is one."""
    assigned: list[tuple[str, float | None]] = []
    for node in module.body:
        if isinstance(node, ast.Assign):
            value = _number(node.value)
            assigned += [(target.id, value) for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            assigned.append((node.target.id, _number(node.value)))
    return assigned


@cache
def constants() -> dict[str, frozenset[float]]:
    """Each upper-case module-level name of scheduler/, predictors/ and service/ -> the numbers it is
    given across modules, and each ``module.NAME`` (the module by its file name) -> the numbers that
    module, or modules of that file name, give it."""
    found: defaultdict[str, set[float]] = defaultdict(set)
    for package in ("scheduler", "predictors", "service"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, value in _assigned(ast.parse(path.read_text())):
                if value is not None and name.isupper():
                    found[name].add(value)
                    found[f"{path.stem}.{name}"].add(value)
    return {name: frozenset(values) for name, values in found.items()}


def wrong_values(text: str) -> list[tuple[str, str]]:
    """The spans of ``text`` that give a constant of ours a value the code does not (name, span)."""
    wrong = []
    for match in _GIVEN.finditer(text):
        name, given, unit = match.group(1), match.group(2), match.group(3)
        values = constants().get(name, frozenset())
        if len(values) != 1:
            continue  # not ours, not a number, or two modules' values: the doc cannot mean one
        (value,) = values
        read = float(given.replace(",", "")) * _SCALE.get(unit or "", 1.0)
        if abs(read - value) > 1e-9 * max(1.0, abs(value)):
            wrong.append((name, match.group(0)))
    return wrong


def test_every_constant_the_docs_give_with_its_value_has_that_value() -> None:
    wrong = [
        (str(path.relative_to(ROOT)), name, span)
        for path in doc_files()
        if str(path.relative_to(ROOT)) not in LOGS
        for name, span in wrong_values(path.read_text())
    ]
    assert wrong == []


def test_the_docs_give_round_50s_constants_with_their_values() -> None:
    """The spans this test reads are there to read: round 50's constants are given with a value."""
    text = "\n".join(path.read_text() for path in doc_files() if str(path.relative_to(ROOT)) not in LOGS)
    given = {match.group(1) for match in _GIVEN.finditer(text)}
    assert {"FOLD_WAIT_S", "LAST_ACTS_S", "FORCED_STATUS", "BLEND_STEPS"} <= given


def test_a_stale_value_in_any_unit_is_caught_and_the_current_one_not() -> None:
    stale = "exits `FORCED_STATUS` (0); `FOLD_WAIT_S` (1.2 s) or `LAST_ACTS_S`, 500 ms; `RANK_TOLERANCE` (5%)"
    caught = ["FORCED_STATUS", "FOLD_WAIT_S", "LAST_ACTS_S", "RANK_TOLERANCE"]
    assert [name for name, _ in wrong_values(stale)] == caught
    current = "exits `FORCED_STATUS` (70); `FOLD_WAIT_S` (50 ms), `LAST_ACTS_S` (1 s), `RANK_TOLERANCE`, 1%"
    assert wrong_values(current) == []


def test_the_docs_give_round_51s_constants_with_their_values() -> None:
    """The staging folders' sweep bound (review51a) is given where an operator reads it, by its
    module: ``STALE_S`` alone is two constants (the sidecar's health has its own)."""
    text = "\n".join(path.read_text() for path in doc_files() if str(path.relative_to(ROOT)) not in LOGS)
    given = {match.group(1) for match in _GIVEN.finditer(text)}
    assert "store_sweep.STALE_S" in given
    assert len(constants()["STALE_S"]) > 1


def test_a_name_given_with_its_module_is_read_against_that_module_alone() -> None:
    assert wrong_values("`store_sweep.STALE_S` (1 h); `health.STALE_S` (30)") == []
    stale = "`store_sweep.STALE_S` (30); `health.STALE_S` (1 h); `nomodule.STALE_S` (7 h)"
    assert [name for name, _ in wrong_values(stale)] == ["store_sweep.STALE_S", "health.STALE_S"]


def test_a_name_not_ours_or_given_two_values_is_not_read() -> None:
    assert wrong_values("`XRANGE`, 10,000 a page; `OPTIMAL` 5 of 7; `CHUNK` (4 units)") == []
    assert len(constants()["CHUNK"]) > 1
