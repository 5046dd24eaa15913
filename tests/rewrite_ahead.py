"""Every test module's asserts rewritten once, in pytest-xdist's controller, before its workers start.

pytest rewrites each test module's ``assert`` statements as it imports the module, so that a failing one
says what each side was, and caches the rewritten code beside the module (``__pycache__``, where Python may
write bytecode) for the next import to read. Every xdist worker collects the whole suite, so on a fresh
clone ``make test``'s five workers start together, find no cache, and each rewrite all ~670 test modules:
~12 CPU-s a worker of its ~23 CPU-s of collection, on CI's two cores (docs/experiments.md, collect58).
Rewritten here first, by pytest's own rewrite into pytest's own cache and over the host's cores, the
workers find every module's cached code: the same rewritten code, so the same assertion messages, written
once instead of once a worker.

Where Python may not write bytecode (``PYTHONDONTWRITEBYTECODE``), pytest writes no cache and neither does
this: each worker then rewrites for itself, as before. ``make test`` lets Python write it (the Makefile).

The rewrite and its cache are pytest's private helpers (``_pytest.assertion.rewrite``), which change between
releases (9.x reads a source hash where 8.x read a stat). They are reached through ``rewrite_helpers``, which
checks each one's parameters against those this was written for: where one is missing or takes others, it
answers None and nothing is written ahead, so each worker rewrites for itself, as pytest does without this:
slower, never broken. A module that does not compile is left to the worker too, whose import reports it as
pytest reports any module that fails to import.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

import pytest

# The session's config, for the forked processes that rewrite (set before they fork, read in them): a
# config does not pickle, and the rewrite reads its ini (the assertion-pass hook) as the workers' does.
_config: pytest.Config | None = None

# pytest's private helpers this calls, each with the parameters it was written against (pytest 9.2): a
# pytest whose helper is gone or takes others (8.x's ``_write_pyc`` took ``source_stat``) is not used.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "_rewrite_test": ("fn", "config"),
    "_write_pyc": ("state", "co", "source_hash", "pyc"),
    "_read_pyc": ("source", "pyc", "trace"),
    "get_cache_dir": ("file_path",),
    "try_makedirs": ("cache_dir",),
}


@dataclass(frozen=True)
class Rewriter:
    """pytest's own rewrite and cache helpers, found with the parameters this calls them with."""

    pyc_tail: str
    state_key: Any
    rewrite_test: Callable[[Path, pytest.Config], tuple[bytes, CodeType]]
    write_pyc: Callable[[Any, CodeType, bytes, Path], bool]
    read_pyc: Callable[[Path, Path], CodeType | None]
    cache_dir: Callable[[Path], Path]
    makedirs: Callable[[Path], bool]

    def cached_pyc(self, module: Path) -> Path:
        """Where pytest looks for ``module``'s rewritten code (``__pycache__`` or ``sys.pycache_prefix``)."""
        return self.cache_dir(module) / (module.name[: -len(".py")] + self.pyc_tail)


def _import(name: str) -> ModuleType:
    """The module ``name``: the one door to pytest's private modules, so a test can shut it."""
    return importlib.import_module(name)


def rewrite_helpers() -> Rewriter | None:
    """pytest's rewrite helpers where this pytest has each of them with the parameters in ``SIGNATURES``,
    else None: writing ahead is then left undone, the workers rewriting as they would without it."""
    try:
        module = _import("_pytest.assertion.rewrite")
        helpers = {name: getattr(module, name) for name in SIGNATURES}
        pyc_tail, state_key = module.PYC_TAIL, module.assertstate_key
    except (ImportError, AttributeError):
        return None
    if not isinstance(pyc_tail, str) or any(_parameters(helpers[n]) != p for n, p in SIGNATURES.items()):
        return None
    return Rewriter(
        pyc_tail,
        state_key,
        helpers["_rewrite_test"],
        helpers["_write_pyc"],
        helpers["_read_pyc"],
        helpers["get_cache_dir"],
        helpers["try_makedirs"],
    )


def _parameters(helper: Any) -> tuple[str, ...] | None:
    """The names of ``helper``'s parameters, in order; None where it is no function one can read them of."""
    try:
        return tuple(inspect.signature(helper).parameters)
    except (TypeError, ValueError):
        return None


def modules_to_rewrite(config: pytest.Config) -> list[Path]:
    """The modules pytest would rewrite by name under the session's paths (``modules_under``)."""
    paths = [config.invocation_params.dir / arg.split("::")[0] for arg in config.args]
    return modules_under(paths, config.getini("python_files"))


def modules_under(paths: Iterable[Path], patterns: list[str]) -> list[Path]:
    """The files or the files under the folders of ``paths`` that pytest rewrites by their name: those
    matching its ``python_files`` ``patterns``, and every ``conftest.py`` (the plugin modules it is also
    told to rewrite are a few helpers: left to the workers)."""
    found: set[Path] = set()
    for path in paths:
        for candidate in _python_files(path):
            if candidate.name == "conftest.py" or any(_matches(p, candidate) for p in patterns):
                found.add(candidate.resolve())
    return sorted(found)


def _matches(pattern: str, path: Path) -> bool:
    """Whether ``path`` matches a ``python_files`` ``pattern`` as pytest's ``fnmatch_ex`` matches it: its
    name where the pattern names no folder, else its path's end. Here, not pytest's private helper: a
    module matched otherwise than pytest would is only rewritten by the worker, or written unread."""
    if os.sep not in pattern:
        return fnmatch.fnmatch(path.name, pattern)
    return fnmatch.fnmatch(str(path), pattern if os.path.isabs(pattern) else f"*{os.sep}{pattern}")


def _python_files(path: Path) -> Iterator[Path]:
    """``path`` itself if a Python file, else every Python file under it outside ``__pycache__``."""
    if path.is_file() and path.suffix == ".py":
        yield path
    elif path.is_dir():
        yield from (p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def rewrite_ahead(config: pytest.Config, modules: Iterable[Path]) -> int:
    """Write pytest's cached rewrite of each of ``modules`` that has none up to date, over the host's
    cores; the number written. Nothing where Python may not write bytecode, as pytest itself, where
    pytest does not rewrite asserts (``--assert=plain``), nor where this pytest's helpers are not those
    this was written for (``rewrite_helpers``)."""
    rewriter = rewrite_helpers()
    if rewriter is None or sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return 0
    todo = [m for m in modules if rewriter.read_pyc(m, rewriter.cached_pyc(m)) is None]
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or len(todo) < 2 * cores:
        return _rewrite_each(config, todo)
    global _config
    _config = config
    try:
        with multiprocessing.get_context("fork").Pool(cores) as pool:
            return sum(pool.map(_rewrite_forked, [todo[i::cores] for i in range(cores)]))
    finally:
        _config = None


def _rewrite_forked(modules: list[Path]) -> int:
    """``_rewrite_each`` in a forked process, on the config its parent set before forking."""
    assert _config is not None, "set by rewrite_ahead before the pool forks"
    return _rewrite_each(_config, modules)


def _rewrite_each(config: pytest.Config, modules: list[Path]) -> int:
    """pytest's own rewrite of each module, written where and as pytest reads it (atomically: a worker
    that rewrites the same module at once, or reads it, never sees half a file); the number written."""
    rewriter = rewrite_helpers()
    state = None if rewriter is None else config.stash.get(rewriter.state_key, None)
    if rewriter is None or state is None:
        return 0  # no assertion state: pytest is not rewriting this session
    written = 0
    for module in modules:
        pyc = rewriter.cached_pyc(module)
        if not rewriter.makedirs(pyc.parent):
            continue  # a read-only tree: the workers rewrite it, as pytest would
        try:
            source_hash, code = rewriter.rewrite_test(module, config)
        except Exception:  # a module that does not compile: its worker's import reports it
            continue
        if not (isinstance(source_hash, bytes) and isinstance(code, CodeType)):
            return written  # this pytest's rewrite answers in another form: left to the workers
        written += rewriter.write_pyc(state, code, source_hash, pyc)
    return written


def is_xdist_controller(config: pytest.Config) -> bool:
    """Whether this process hands tests to pytest-xdist workers (``-n`` of 1 or more), each of which
    collects the whole suite."""
    distributing = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    return distributing and not hasattr(config, "workerinput")
