"""Every ``module.name`` the user-facing docs give in backticks names something that module defines,
and every bare file name (`test_pull_fail_resends.py`, `holds.py`) is a file of the repository.

The docs often name code by its module's file name alone (`bandcover._clamped`, `key_prefix.check_prefix`,
`resends.fail_again`), a method by its module rather than its class. tests/test_doc_references.py reads
only package-qualified names (``service.delivery.keys``) and paths, so these went unchecked: round 46
moved ``_clamped`` from ``levels`` to ``bandcover`` and ``check_prefix`` from ``keys`` to ``key_prefix``,
and solver.md and delivery.md named the old homes until the docs were brought along by hand.

A span counts as such a name where its first part is the file name of a module of ours and what
follows is not a file's extension (`store.py`, `tokenizer.json`); the name holds where one of those
modules defines its first part (a function, class or assignment) at its top level or in a class.
A bare ``name.py`` is how the docs name a test or a module beside the one just named: a test
renamed or folded into another (round 46 named five new test files so in sidecar.md alone) leaves
the reader looking for a file that is not there, which the path check does not see either.
docs/experiments.md is left out: a dated log, which names the code as it was then.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.doc_refs import ROOT, TOP_DIRS, doc_files
from tests.doc_short_names import bare_files, modules_by_name, short_references

LOGS = frozenset({"docs/experiments.md"})
# Bare file names of other projects the docs cite, each with why.
NOT_OURS: dict[str, str] = {
    "schedule_policy.py": "SGLang's scheduler (simulator.md, fidelity to SGLang)",
    "schedule_batch.py": "SGLang's batch (simulator.md, fidelity to SGLang)",
    "tool_agent_loop.py": "veRL's agent loop (trace-format.md, multi-turn rollouts)",
}


@cache
def _defined(path: Path) -> frozenset[str]:
    """The names ``path`` defines at its top level and in the bodies of its classes."""
    tree = ast.parse(path.read_text())
    bodies = [tree.body, *(node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef))]
    names: set[str] = set()
    for body in bodies:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return frozenset(names)


@cache
def _file_names() -> frozenset[str]:
    """The names of the repository's Python files: the packages', the tests', the deployment's."""
    return frozenset(path.name for top in TOP_DIRS for path in (ROOT / top).rglob("*.py"))


def _holds(module: str, name: str) -> bool:
    return any(name in _defined(path) for path in modules_by_name()[module])


def _user_docs() -> list[Path]:
    return [path for path in doc_files() if str(path.relative_to(ROOT)) not in LOGS]


def test_every_module_qualified_name_in_the_docs_is_defined_by_that_module() -> None:
    references = [ref for doc in _user_docs() for ref in short_references(doc)]
    assert len(references) > 50  # the reader finds them: the docs hold well over a hundred
    assert [
        f"{where}: {module}.{name}" for where, module, name in references if not _holds(module, name)
    ] == []


def test_a_name_moved_to_another_module_is_caught() -> None:
    """solver.md named ``levels._clamped`` until round 46 moved the band cover to ``bandcover.py``:
    the span is read as that module's name, and the old home does not define it."""
    solver = {(module, name) for _, module, name in short_references(ROOT / "docs" / "solver.md")}
    assert ("bandcover", "_clamped") in solver
    assert _holds("bandcover", "_clamped")
    assert not _holds("levels", "_clamped")


def test_every_bare_file_name_in_the_docs_is_a_file_of_the_repository() -> None:
    named = [ref for doc in _user_docs() for ref in bare_files(doc)]
    assert len(named) > 50
    assert [f"{where}: {name}" for where, name in named if name not in _file_names() | set(NOT_OURS)] == []


def test_a_renamed_test_file_is_caught() -> None:
    """sidecar.md names `test_pull_fail_resends.py` bare; a name no file has is not passed."""
    sidecar = {name for _, name in bare_files(ROOT / "docs" / "sidecar.md")}
    assert "test_pull_fail_resends.py" in sidecar <= _file_names()
    assert "test_pull_fail_resent.py" not in _file_names()
