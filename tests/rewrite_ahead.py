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
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import (
    PYC_TAIL,
    _read_pyc,
    _rewrite_test,
    _write_pyc,
    assertstate_key,
    get_cache_dir,
    try_makedirs,
)
from _pytest.pathlib import fnmatch_ex

# The session's config, for the forked processes that rewrite (set before they fork, read in them): a
# config does not pickle, and the rewrite reads its ini (the assertion-pass hook) as the workers' does.
_config: pytest.Config | None = None


def cached_pyc(module: Path) -> Path:
    """Where pytest looks for ``module``'s rewritten code (``__pycache__`` or ``sys.pycache_prefix``)."""
    return get_cache_dir(module) / (module.name[: -len(".py")] + PYC_TAIL)


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
            if candidate.name == "conftest.py" or any(fnmatch_ex(p, candidate) for p in patterns):
                found.add(candidate.resolve())
    return sorted(found)


def _python_files(path: Path) -> Iterator[Path]:
    """``path`` itself if a Python file, else every Python file under it outside ``__pycache__``."""
    if path.is_file() and path.suffix == ".py":
        yield path
    elif path.is_dir():
        yield from (p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def rewrite_ahead(config: pytest.Config, modules: Iterable[Path]) -> int:
    """Write pytest's cached rewrite of each of ``modules`` that has none up to date, over the host's
    cores; the number written. Nothing where Python may not write bytecode, as pytest itself, nor
    where pytest does not rewrite asserts (``--assert=plain``)."""
    if sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return 0
    todo = [m for m in modules if _read_pyc(m, cached_pyc(m)) is None]
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
    state = config.stash[assertstate_key]
    written = 0
    for module in modules:
        pyc = cached_pyc(module)
        if not try_makedirs(pyc.parent):
            continue  # a read-only tree: the workers rewrite it, as pytest would
        source_hash, code = _rewrite_test(module, config)
        written += _write_pyc(state, code, source_hash, pyc)
    return written


def is_xdist_controller(config: pytest.Config) -> bool:
    """Whether this process hands tests to pytest-xdist workers (``-n`` of 1 or more), each of which
    collects the whole suite."""
    distributing = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    return distributing and not hasattr(config, "workerinput")
