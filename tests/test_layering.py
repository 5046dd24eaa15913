"""Imports go one way: scheduler <- predictors <- service. The core never imports outward.

Checked on the syntax tree, so besides ``import``/``from`` statements a dynamic import by a literal
name (``importlib.import_module("service.app")``, ``__import__("predictors.model")``) counts too; and
the scheduler core may not reach the file system or environment at all (``open(``, ``os``,
``pathlib``, ``io``, ``importlib``, ``builtins``), which also keeps a computed dynamic import out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "scheduler": {"predictors", "service"},
    "predictors": {"service"},
    "service": set(),
}
IO_MODULES = {"redis", "httpx", "fastapi", "uvicorn", "socket", "subprocess", "pyarrow", "requests"}
# Not network I/O, but the doors to files, the environment and computed imports: the scheduler core
# uses none of them today (it takes and returns values), so none is allowed.
SCHEDULER_ONLY = {"os", "pathlib", "io", "importlib", "builtins", "shutil", "tempfile"}
IO_CALLS = {"open"}  # builtins the scheduler core may not call
DYNAMIC_IMPORTS = {"import_module", "__import__"}  # importlib.import_module(...), __import__(...)


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), filename=str(path))


def _call_name(node: ast.Call) -> str | None:
    """``f`` for ``f(...)`` and ``m.f(...)``."""
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def imported_roots(tree: ast.AST) -> set[str]:
    """Top-level packages the module imports, statically or by a dynamic import of a literal name."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and _call_name(node) in DYNAMIC_IMPORTS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                roots.add(first.value.split(".")[0])
    return roots


def io_calls(tree: ast.AST) -> set[str]:
    """Calls of I/O builtins (``open(...)``) by bare name."""
    return {
        f"{node.func.id}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS
    }


def layering_offenders(root: Path, package: str) -> dict[str, list[str]]:
    found = {
        str(path.relative_to(root)): sorted(imported_roots(_tree(path)) & FORBIDDEN[package])
        for path in (root / package).rglob("*.py")
    }
    return {k: v for k, v in found.items() if v}


def io_offenders(root: Path) -> dict[str, list[str]]:
    found = {}
    for path in (root / "scheduler").rglob("*.py"):
        tree = _tree(path)
        found[str(path.relative_to(root))] = sorted(
            (imported_roots(tree) & (IO_MODULES | SCHEDULER_ONLY)) | io_calls(tree)
        )
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_inward(package: str) -> None:
    assert layering_offenders(ROOT, package) == {}


def test_scheduler_core_does_no_io() -> None:
    assert io_offenders(ROOT) == {}


def test_the_core_s_domain_types_are_frozen_dataclasses() -> None:
    """Issue 2 asks for frozen dataclasses with no I/O: a plan or request shared between the planning
    threads, the replay's processes and the service's answer cannot change under its readers. The
    I/O half was tested above; nothing failed if a type lost ``frozen=True``."""
    import dataclasses

    from scheduler import devices, types

    for module in (types, devices):
        own = [c for c in vars(module).values() if isinstance(c, type)]
        classes = [c for c in own if c.__module__ == module.__name__]
        assert classes, module.__name__
        for cls in classes:
            assert dataclasses.is_dataclass(cls), cls.__qualname__
            assert cls.__dataclass_params__.frozen, cls.__qualname__  # type: ignore[attr-defined]


PROBE = """
import importlib
import os
from pathlib import Path
import io as _io

importlib.import_module("service.app")
__import__("predictors.model")
__import__("socket")
open("x")
os.environ.get("HOME")
"""


def test_the_checks_catch_dynamic_imports_and_file_access(tmp_path: Path) -> None:
    # A probe module that each of these used to slip past the checks.
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "probe.py").write_text(PROBE)
    assert layering_offenders(tmp_path, "scheduler") == {"scheduler/probe.py": ["predictors", "service"]}
    assert io_offenders(tmp_path) == {
        "scheduler/probe.py": ["importlib", "io", "open()", "os", "pathlib", "socket"]
    }
