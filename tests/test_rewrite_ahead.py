"""Test modules rewritten ahead of pytest-xdist's workers are read back by pytest and explain a failing
assert as pytest's own import would; nothing is written where Python may not write bytecode, where
pytest does not rewrite asserts, nor where this pytest's private helpers are not those it was written
for (the door to them shut, one gone, one taking other parameters): the run goes on, each worker
rewriting for itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdist import plugin as xdist_plugin

from tests import rewrite_ahead as rewrite_ahead_module
from tests.rewrite_ahead import (
    SIGNATURES,
    Rewriter,
    is_xdist_controller,
    modules_to_rewrite,
    modules_under,
    rewrite_ahead,
    rewrite_helpers,
)

pytest_plugins = ("pytester",)

# pytest's own helpers, where this pytest has them as tests/rewrite_ahead.py calls them; the tests that
# read its cache back skip where it has not (and rewrite_ahead writes nothing there: the seam's tests).
REWRITER = rewrite_helpers()
needs_rewriter = pytest.mark.skipif(
    REWRITER is None, reason="this pytest's rewrite helpers differ: none written"
)


def cached_pyc(module: Path) -> Path:
    """Where pytest looks for ``module``'s rewritten code."""
    assert REWRITER is not None
    return REWRITER.cached_pyc(module)


def _failing_modules(folder: Path, count: int) -> list[Path]:
    """``count`` test modules under ``folder``, each one test whose assert fails: 2 against i."""
    modules = []
    for i in range(count):
        module = folder / f"test_sample_{i}.py"
        module.write_text(f"def test_sum():\n    total = 1 + 1\n    assert total == {i + 3}\n")
        modules.append(module)
    return modules


def _failure(module: Path) -> str:
    """The message of the failing assert in ``module``'s cached code, as pytest would import it."""
    assert REWRITER is not None
    code = REWRITER.read_pyc(module, cached_pyc(module))
    assert code is not None, f"no up-to-date rewritten code for {module}"
    namespace: dict[str, object] = {}
    exec(code, namespace)
    test = namespace["test_sum"]
    assert callable(test)
    with pytest.raises(AssertionError) as failed:
        test()
    return str(failed.value)


@needs_rewriter
def test_each_module_is_rewritten_once_and_its_failing_assert_says_what_each_side_was(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 1
    assert _failure(one) == "assert 2 == 3"
    assert rewrite_ahead(pytestconfig, [one]) == 0  # up to date: left as written


@needs_rewriter
def test_many_modules_are_rewritten_over_the_cores_each_as_alone(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    modules = _failing_modules(tmp_path, 9)
    assert rewrite_ahead(pytestconfig, modules) == 9
    assert [_failure(m) for m in modules] == [f"assert 2 == {i + 3}" for i in range(9)]


@needs_rewriter
def test_a_module_changed_since_is_rewritten_again(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    one, *_ = _failing_modules(tmp_path, 1)
    rewrite_ahead(pytestconfig, [one])
    one.write_text("def test_sum():\n    total = 1 + 1\n    assert total == 5\n")
    assert rewrite_ahead(pytestconfig, [one]) == 1
    assert _failure(one) == "assert 2 == 5"


@needs_rewriter
def test_nothing_is_written_where_python_may_not_write_bytecode(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 0
    assert not cached_pyc(one).exists()


@needs_rewriter
def test_nothing_is_written_where_pytest_does_not_rewrite_asserts(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(pytestconfig.option, "assertmode", "plain")
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 0
    assert not cached_pyc(one).exists()


@needs_rewriter
def test_a_module_whose_cache_cannot_be_written_is_not_counted_as_written(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    one, *_ = _failing_modules(tmp_path, 1)
    (cached_pyc(one) / "taken").mkdir(parents=True)  # a folder where the cache file goes
    assert rewrite_ahead(pytestconfig, [one]) == 0  # pytest's own import rewrites it, as before


def test_the_modules_are_those_pytest_rewrites_by_name_test_files_and_conftests(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    for name in ("test_a.py", "b_test.py", "conftest.py", "helper.py", "__init__.py"):
        (tmp_path / "pkg" / name).write_text("")
    (tmp_path / "pkg" / "__pycache__" / "test_c.py").write_text("")
    (tmp_path / "test_top.py").write_text("")
    found = modules_under([tmp_path / "pkg", tmp_path / "test_top.py"], ["test_*.py", "*_test.py"])
    assert [p.relative_to(tmp_path.resolve()).as_posix() for p in found] == [
        "pkg/b_test.py",
        "pkg/conftest.py",
        "pkg/test_a.py",
        "test_top.py",
    ]


def _parsed(pytester: pytest.Pytester, *args: str) -> pytest.Config:
    """The config of a pytest run given ``args``, as xdist's command-line hook leaves it (``-n`` sets
    the distribution mode and the workers' gateways there, after parsing)."""
    config = pytester.parseconfig(*args)
    xdist_plugin.pytest_cmdline_main(config)
    return config


def test_only_the_process_that_hands_tests_to_xdist_workers_rewrites_ahead(pytester: pytest.Pytester) -> None:
    assert is_xdist_controller(_parsed(pytester, "-n", "2"))
    assert is_xdist_controller(_parsed(pytester, "-n", "2", "--dist", "loadscope"))
    assert not is_xdist_controller(_parsed(pytester))  # one process: pytest rewrites as it imports
    assert not is_xdist_controller(_parsed(pytester, "-n", "0"))
    assert not is_xdist_controller(_parsed(pytester, "--dist", "loadscope"))  # no workers to hand them to
    worker = _parsed(pytester, "-n", "2")
    worker.workerinput = {"workerid": "gw0"}  # type: ignore[attr-defined]  # as xdist marks its workers
    assert not is_xdist_controller(worker)


def test_the_modules_of_a_run_are_those_under_the_paths_it_names_a_test_id_naming_its_file(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(**{"pkg/test_a": "", "pkg/helper": "", "other/test_b": "", "test_c": ""})
    config = _parsed(pytester, "-n", "2", "pkg", "test_c.py::test_x")
    found = modules_to_rewrite(config)
    named = [p.relative_to(pytester.path.resolve()).as_posix() for p in found]
    assert named == ["pkg/test_a.py", "test_c.py"]


@needs_rewriter
def test_a_module_that_does_not_compile_is_left_to_its_worker_and_the_others_are_written(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_sum(:\n    assert 1\n")
    modules = [broken, *_failing_modules(tmp_path, 8)]  # over the cores: the forked pool's path too
    assert rewrite_ahead(pytestconfig, modules) == 8  # pytest's import of it reports the SyntaxError
    assert not cached_pyc(broken).exists()
    assert rewrite_ahead(pytestconfig, [broken]) == 0  # alone: the path of one process


class _Helpers:
    """A stand-in for ``_pytest.assertion.rewrite``: pytest's own helpers, each replaceable."""

    def __init__(self) -> None:
        import _pytest.assertion.rewrite as rewrite

        self.__dict__.update({name: getattr(rewrite, name) for name in ("PYC_TAIL", "assertstate_key")})
        self.__dict__.update({name: getattr(rewrite, name) for name in SIGNATURES})


def _door(monkeypatch: pytest.MonkeyPatch, helpers: object) -> None:
    """pytest's private rewrite module, as ``tests.rewrite_ahead`` imports it, replaced by ``helpers``."""
    monkeypatch.setattr(rewrite_ahead_module, "_import", lambda name: helpers)


def _shut(name: str) -> object:
    """An import that fails, as where pytest has moved or removed the module."""
    raise ImportError(f"No module named {name!r}")


def _nothing_written(config: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether ``rewrite_ahead`` writes nothing, over the cores and alone, and raises nothing."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    modules = _failing_modules(tmp_path, 9)
    written = rewrite_ahead(config, modules) + rewrite_ahead(config, modules[:1])
    return written == 0 and not any((tmp_path / "__pycache__").glob("*"))


def test_where_pytests_private_module_cannot_be_imported_nothing_is_written_and_nothing_raised(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rewrite_ahead_module, "_import", _shut)
    assert rewrite_helpers() is None
    assert _nothing_written(pytestconfig, tmp_path, monkeypatch)


@pytest.mark.parametrize("gone", [*SIGNATURES, "PYC_TAIL", "assertstate_key"])
def test_where_a_helper_is_gone_nothing_is_written(
    gone: str, pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helpers = _Helpers()
    delattr(helpers, gone)
    _door(monkeypatch, helpers)
    assert rewrite_helpers() is None
    assert _nothing_written(pytestconfig, tmp_path, monkeypatch)


def test_where_a_helper_takes_other_parameters_nothing_is_written(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helpers = _Helpers()

    def _write_pyc(state: object, co: object, source_stat: object, pyc: Path) -> bool:  # pytest 8.x's
        raise AssertionError("not to be called: it takes a stat where 9.x takes the source's hash")

    helpers._write_pyc = _write_pyc  # type: ignore[attr-defined]
    _door(monkeypatch, helpers)
    assert rewrite_helpers() is None
    assert _nothing_written(pytestconfig, tmp_path, monkeypatch)


def test_where_a_helper_is_no_function_nothing_is_written(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helpers = _Helpers()
    helpers._rewrite_test = 3  # type: ignore[attr-defined]
    _door(monkeypatch, helpers)
    assert rewrite_helpers() is None
    assert _nothing_written(pytestconfig, tmp_path, monkeypatch)


@needs_rewriter
def test_where_the_rewrite_answers_in_another_form_nothing_is_written(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert REWRITER is not None
    helpers = _Helpers()

    def _rewrite_test(fn: Path, config: pytest.Config) -> tuple[object, object]:  # 8.x's (stat, code)
        _, code = REWRITER.rewrite_test(fn, config)
        return fn.stat(), code

    helpers._rewrite_test = _rewrite_test  # type: ignore[attr-defined]
    _door(monkeypatch, helpers)
    assert rewrite_helpers() is not None  # its parameters are those expected: its answer is not
    assert _nothing_written(pytestconfig, tmp_path, monkeypatch)


@needs_rewriter
def test_this_pytests_helpers_are_those_it_was_written_for() -> None:
    """The pytest the project pins has them. Where another has not, this skips rather than fails (the run
    goes on, each worker rewriting for itself), its reason in the run's summary (``-ra``)."""
    assert isinstance(REWRITER, Rewriter)
