"""Test modules rewritten ahead of pytest-xdist's workers are read back by pytest and explain a failing
assert as pytest's own import would; nothing is written where Python may not write bytecode, nor where
pytest does not rewrite asserts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import _read_pyc

from tests.rewrite_ahead import cached_pyc, modules_under, rewrite_ahead


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
    code = _read_pyc(module, cached_pyc(module))
    assert code is not None, f"no up-to-date rewritten code for {module}"
    namespace: dict[str, object] = {}
    exec(code, namespace)
    test = namespace["test_sum"]
    assert callable(test)
    with pytest.raises(AssertionError) as failed:
        test()
    return str(failed.value)


def test_each_module_is_rewritten_once_and_its_failing_assert_says_what_each_side_was(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 1
    assert _failure(one) == "assert 2 == 3"
    assert rewrite_ahead(pytestconfig, [one]) == 0  # up to date: left as written


def test_many_modules_are_rewritten_over_the_cores_each_as_alone(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    modules = _failing_modules(tmp_path, 9)
    assert rewrite_ahead(pytestconfig, modules) == 9
    assert [_failure(m) for m in modules] == [f"assert 2 == {i + 3}" for i in range(9)]


def test_a_module_changed_since_is_rewritten_again(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    one, *_ = _failing_modules(tmp_path, 1)
    rewrite_ahead(pytestconfig, [one])
    one.write_text("def test_sum():\n    total = 1 + 1\n    assert total == 5\n")
    assert rewrite_ahead(pytestconfig, [one]) == 1
    assert _failure(one) == "assert 2 == 5"


def test_nothing_is_written_where_python_may_not_write_bytecode(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 0
    assert not cached_pyc(one).exists()


def test_nothing_is_written_where_pytest_does_not_rewrite_asserts(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(pytestconfig.option, "assertmode", "plain")
    one, *_ = _failing_modules(tmp_path, 1)
    assert rewrite_ahead(pytestconfig, [one]) == 0
    assert not cached_pyc(one).exists()


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
