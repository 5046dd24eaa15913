"""An unlisted scope put back in xdist's queue is ordered by the tests it still has to run, not by
the tests it held: a worker that died after running most of a long new module's tests puts back a
short remainder, which goes out after a scope with more left to run.

Why. ``longest_first_queue`` reorders the queue before each unit goes out, and a scope the cost table
lacks is estimated at the table's mean seconds per test times its tests (``longest_first``); counted
with the tests it had run, a remainder of two was priced as the ten it began with."""

from __future__ import annotations

from tests.scope_costs import longest_first_queue


def test_an_unlisted_scope_is_queued_at_the_tests_it_has_left_to_run() -> None:
    mostly_run = {f"tests/a.py::t{i}": i < 8 for i in range(10)}  # 8 of its 10 done: 2 left
    fresh = {f"tests/b.py::t{i}": False for i in range(5)}  # 5 left
    queue = longest_first_queue({"tests/a.py": mostly_run, "tests/b.py": fresh}, {})
    assert list(queue) == ["tests/b.py", "tests/a.py"]
