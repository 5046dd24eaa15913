"""Every third-party package the code imports is one pyproject.toml declares, not one that comes along.

``anyio``, ``starlette`` and ``typing_extensions`` were imported by the service but arrived only
through fastapi and pydantic: a release of either that drops or caps one (starlette is fastapi's to
pin, and typing_extensions is needed by pydantic only before Python 3.13) would break the import with
nothing in this project's metadata saying so, and the resolver free to pick any version of them. The
imports are read from the source (``ast``), each mapped to the distribution installed for it in this
venv (``importlib.metadata``); nothing is installed or fetched.
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "predictors", "service")


@functools.cache  # both tests read it: parsing the ~300 files was ~1 CPU-s each time (ci59c)
def _imported_top_levels() -> dict[str, str]:
    """Top-level module imported by the three packages -> one file importing it (absolute imports only;
    read once a process: callers do not change it)."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.partition(".")[0], path.relative_to(ROOT).as_posix())
    return found


def _third_party(imported: dict[str, str]) -> dict[str, str]:
    """The imports neither of the standard library nor of the project's own packages."""
    own = set(PACKAGES)
    return {m: f for m, f in imported.items() if m not in sys.stdlib_module_names and m not in own}


def _declared() -> set[str]:
    """Distribution names of ``[project.dependencies]`` and every extra, canonicalized."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        texts += extra
    return {canonicalize_name(Requirement(text).name) for text in texts}


def test_every_third_party_import_of_the_packages_is_a_declared_dependency() -> None:
    providers = metadata.packages_distributions()
    declared = _declared()
    undeclared = []
    for module, where in sorted(_third_party(_imported_top_levels()).items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists, f"{where} imports {module}, which no installed distribution provides"
        if not dists & declared:
            undeclared.append(f"{module} (from {', '.join(sorted(dists))}; imported by {where})")
    assert not undeclared, "imported but not declared in pyproject.toml: " + "; ".join(undeclared)


def test_the_import_reading_sees_a_known_dependency_and_skips_the_standard_library() -> None:
    third_party = _third_party(_imported_top_levels())
    assert "fastapi" in third_party  # the reader finds imports at all
    assert "json" not in third_party
    assert "service" not in third_party
