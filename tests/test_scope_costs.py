"""The suite's scope cost table stays honest: it names only scopes that exist, orders the queue
longest first (an unlisted scope estimated by its test count), and is what a JUnit XML report sums to."""

from __future__ import annotations

from pathlib import Path

from tests.scope_costs import ROOT, SOLVER_SCOPE, costs_from_junit, load_costs, longest_first, scope_of


def test_every_scope_the_table_lists_is_a_test_module_or_the_planners_folder() -> None:
    costs = load_costs()
    assert SOLVER_SCOPE in costs
    missing = [s for s in costs if not (ROOT / s.split("::")[0]).exists() or not s.startswith("tests/")]
    assert missing == []


def test_the_planners_tests_are_one_scope_and_any_other_test_is_its_modules_or_classs() -> None:
    assert scope_of("tests/scheduler/deep/test_x.py::test_a[1]") == SOLVER_SCOPE
    assert scope_of("tests/service/api/test_serve.py::test_a[x]") == "tests/service/api/test_serve.py"
    assert scope_of("tests/deploy/test_k.py::TestK::test_a") == "tests/deploy/test_k.py::TestK"


def test_listed_scopes_go_longest_first_and_an_unlisted_one_at_the_mean_seconds_per_test() -> None:
    costs = {"a.py": (30.0, 1), "b.py": (10.0, 10), "c.py": (2.0, 9)}  # 42 s over 20 tests: 2.1 s each
    tests = {"c.py": 9, "b.py": 10, "new_small.py": 2, "a.py": 1, "new_big.py": 6}
    assert longest_first(tests, costs) == ["a.py", "new_big.py", "b.py", "new_small.py", "c.py"]
    assert longest_first(tests, {}) == ["b.py", "c.py", "new_big.py", "new_small.py", "a.py"]


def test_a_junit_report_sums_each_scopes_cases_with_the_planners_as_one(tmp_path: Path) -> None:
    report = tmp_path / "j.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.scheduler.test_admission" name="test_a" time="1.25"/>'
        '<testcase classname="tests.scheduler.test_above_others" name="test_b[x]" time="2.5"/>'
        '<testcase classname="tests.test_module_size" name="test_c" time="0.5"/>'
        '<testcase classname="tests.test_module_size" name="test_d" time="0.25"/>'
        '<testcase classname="tests.test_module_size.Within" name="test_e" time="7"/>'
        "</testsuite></testsuites>"
    )
    assert costs_from_junit([report]) == {
        "tests/test_module_size.py::Within": (7.0, 1),
        SOLVER_SCOPE: (3.8, 2),
        "tests/test_module_size.py": (0.8, 2),
    }
