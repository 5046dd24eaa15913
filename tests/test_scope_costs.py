"""The suite's scope cost table stays honest: it names only scopes that exist, orders the queue
longest first (an unlisted scope estimated by its test count), and is what a JUnit XML report sums to;
the planner's modules on the budget's clock share one scope, those off it (a checked list) their own.
The scheduler built on it is driven through pytest-xdist's own ``LoadScopeScheduling`` (its private
members are what it overrides), with stand-ins for the worker processes xdist would start."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.scope_costs import (
    OFF_THE_CLOCK,
    ROOT,
    SOLVER_SCOPE,
    costs_from_junit,
    load_costs,
    loadscope_longest_first,
    longest_first,
    scope_of,
)


def test_every_scope_the_table_lists_is_a_test_module_or_the_planners_folder() -> None:
    costs = load_costs()
    assert SOLVER_SCOPE in costs
    missing = [s for s in costs if not (ROOT / s.split("::")[0]).exists() or not s.startswith("tests/")]
    assert missing == []


def test_the_planners_tests_on_the_budgets_clock_are_one_scope_any_other_its_modules_or_classs() -> None:
    assert scope_of("tests/scheduler/deep/test_x.py::test_a[1]") == SOLVER_SCOPE  # unlisted: on the clock
    assert scope_of("tests/scheduler/test_cpsat.py::test_a") == SOLVER_SCOPE
    assert scope_of("tests/scheduler/test_synth.py::test_a[x]") == "tests/scheduler/test_synth.py"
    in_class = "tests/scheduler/test_synth.py::TestK"
    assert scope_of(f"{in_class}::test_a") == in_class
    assert scope_of("tests/service/api/test_serve.py::test_a[x]") == "tests/service/api/test_serve.py"
    assert scope_of("tests/deploy/test_k.py::TestK::test_a") == "tests/deploy/test_k.py::TestK"


def test_listed_scopes_go_longest_first_and_an_unlisted_one_at_the_mean_seconds_per_test() -> None:
    costs = {"a.py": (30.0, 1), "b.py": (10.0, 10), "c.py": (2.0, 9)}  # 42 s over 20 tests: 2.1 s each
    tests = {"c.py": 9, "b.py": 10, "new_small.py": 2, "a.py": 1, "new_big.py": 6}
    assert longest_first(tests, costs) == ["a.py", "new_big.py", "b.py", "new_small.py", "c.py"]
    assert longest_first(tests, {}) == ["b.py", "c.py", "new_big.py", "new_small.py", "a.py"]


def test_a_junit_report_sums_each_scopes_cases_with_the_planners_on_the_clock_as_one(tmp_path: Path) -> None:
    report = tmp_path / "j.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.scheduler.test_cpsat" name="test_a" time="1.25"/>'
        '<testcase classname="tests.scheduler.test_policies" name="test_b[x]" time="2.5"/>'
        '<testcase classname="tests.scheduler.test_admission" name="test_f" time="0.5"/>'
        '<testcase classname="tests.test_module_size" name="test_c" time="0.5"/>'
        '<testcase classname="tests.test_module_size" name="test_d" time="0.25"/>'
        '<testcase classname="tests.test_module_size.Within" name="test_e" time="7"/>'
        "</testsuite></testsuites>"
    )
    assert costs_from_junit([report]) == {
        "tests/test_module_size.py::Within": (7.0, 1),
        SOLVER_SCOPE: (3.8, 2),
        "tests/test_module_size.py": (0.8, 2),
        "tests/scheduler/test_admission.py": (0.5, 1),
    }


class _Config:
    """What the scheduler reads of pytest's config: two local workers, xdist 3.8's reorder option."""

    def __init__(self, reorder: bool) -> None:
        self.option = SimpleNamespace(loadscopereorder=reorder)

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return ["2*popen"]


class _Worker:
    """A worker as the scheduler sees one: the test indexes it was sent, whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


PLANNER = [f"{SOLVER_SCOPE}test_p.py::test_{i}" for i in range(4)]
COLLECTION = [
    *(f"tests/c.py::test_{i}" for i in range(3)),
    *PLANNER,
    "tests/b.py::t",
    "tests/d.py::t",
    "tests/e.py::t",
]
COSTS = {
    SOLVER_SCOPE: (100.0, 4),
    "tests/b.py": (10.0, 1),
    "tests/c.py": (5.0, 3),
    "tests/d.py": (1.0, 1),
    "tests/e.py": (2.0, 1),
}


def _scheduled(reorder: bool, costs: dict[str, tuple[float, int]] = COSTS) -> tuple[Any, _Worker, _Worker]:
    """Two workers that collected ``COLLECTION``, their first units sent, the queue priced by ``costs``."""
    scheduler = loadscope_longest_first(_Config(reorder))
    scheduler.costs = costs
    first, second = _Worker("gw0"), _Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler, first, second


def _ids(indexes: list[int]) -> list[str]:
    return [COLLECTION[i] for i in indexes]


def test_the_longest_scopes_go_out_first_and_a_dead_workers_scope_goes_back_to_its_place() -> None:
    """A worker that dies has its scope put back at the queue's end by xdist; the planner's, the
    longest, then went out after every short one, the run ending on it (review53c)."""
    scheduler, first, second = _scheduled(reorder=True)
    assert _ids(first.sent) == PLANNER
    assert _ids(second.sent) == ["tests/b.py::t", *(f"tests/c.py::test_{i}" for i in range(3))]
    scheduler.mark_test_complete(first, COLLECTION.index(PLANNER[0]))
    scheduler.remove_node(first)  # died: its three planner tests left are queued again
    for index in second.sent[:2]:
        scheduler.mark_test_complete(second, index)  # down to two pending: it takes the next unit
    assert _ids(second.sent[4:]) == PLANNER[1:]


def test_no_loadscope_reorder_keeps_the_collections_order() -> None:
    _, first, second = _scheduled(reorder=False)
    assert _ids(first.sent) == [f"tests/c.py::test_{i}" for i in range(3)]
    assert _ids(second.sent) == PLANNER


def test_every_module_listed_off_the_budgets_clock_is_a_test_module_of_the_planner() -> None:
    assert sorted(m for m in OFF_THE_CLOCK if not (ROOT / SOLVER_SCOPE / m).is_file()) == []
    assert all(m.startswith("test_") and m.endswith(".py") for m in OFF_THE_CLOCK)


def test_a_new_module_goes_out_at_its_estimate_and_a_deleted_one_the_table_lists_is_passed_over() -> None:
    """A stale table costs order, never a test of the run: a module added since it was measured (here
    tests/e.py) is priced at the table's mean seconds per test times its tests (616 s over 14: 44 s,
    after the planner's 100 s, before b's 10), and one it lists that the run no longer collects
    (tests/deleted.py) is passed over; every test collected goes out once."""
    stale = {scope: cost for scope, cost in COSTS.items() if scope != "tests/e.py"}
    stale["tests/deleted.py"] = (500.0, 5)
    scheduler, first, second = _scheduled(reorder=True, costs=stale)
    assert _ids(first.sent) == PLANNER
    assert _ids(second.sent)[:2] == ["tests/e.py::t", "tests/b.py::t"]
    assert list(scheduler.workqueue) == ["tests/c.py", "tests/d.py"]
    done: set[int] = set()
    for _ in range(len(COLLECTION)):  # each worker finishing what it holds takes the next unit
        for worker in (first, second):
            for index in [i for i in worker.sent if i not in done]:
                done.add(index)
                scheduler.mark_test_complete(worker, index)
    assert not scheduler.workqueue
    assert sorted(_ids(first.sent + second.sent)) == sorted(COLLECTION)
