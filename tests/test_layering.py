"""Imports go one way: scheduler <- predictors <- service. The core never imports outward."""

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


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_inward(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scheduler_core_does_no_io() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & IO_MODULES)
        for path in (ROOT / "scheduler").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
