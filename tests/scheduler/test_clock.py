"""A frozen planning clock (the replay's): the plan depends on the request, not on the host's load."""

from __future__ import annotations

import ast
import math
import time
from pathlib import Path

import pytest

from scheduler import clock
from scheduler.planner import plan
from scheduler.policies.sat import new_solver
from tests.scheduler.fake_clock import SteppingClock
from tests.scheduler.mixed_requests import decisions, mixed_request


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_a_frozen_clock_plans_the_same_on_a_host_so_loaded_each_step_seems_to_take_a_second(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    request = mixed_request()
    with clock.frozen():
        idle = plan(request, policy)
    # A host where each step seems to take a second, and whose clock reads from another origin
    # (``perf_counter``'s is arbitrary): a budget read on it anywhere would now be decided otherwise.
    monkeypatch.setattr(time, "perf_counter", SteppingClock(start=-1e6).now)
    on_the_wall = plan(request, policy)
    with clock.frozen():
        loaded = plan(request, policy)
    assert decisions(on_the_wall) != decisions(idle)  # the wall clock gives up phases on that host
    assert decisions(loaded) == decisions(idle)


def test_outside_a_frozen_clock_the_planning_clock_is_the_wall_clock() -> None:
    before = time.perf_counter()
    assert before <= clock.now() <= time.perf_counter()
    with clock.frozen():
        assert clock.now() == clock.now() == 0.0
    assert clock.now() >= before


def test_under_a_frozen_clock_only_the_deterministic_limit_stops_a_solve() -> None:
    assert new_solver(0.5, 0).parameters.max_time_in_seconds == pytest.approx(1.5)  # WALL_SAFETY
    with clock.frozen():
        solver = new_solver(0.5, 0, wall_s=0.01)
    assert math.isinf(solver.parameters.max_time_in_seconds)
    assert solver.parameters.max_deterministic_time == pytest.approx(0.5)


# The scheduler modules that may read the host's clock: ``clock`` itself, ``planner`` for the
# wall time a plan reports (``Plan.wall_time_s``, a measurement the test above shows decides nothing),
# and ``giveup`` for the caller's hard deadline, real time by definition: it decides whether a plan
# is given up, never what a plan is (without one it reads no clock: ``test_giveup``).
# policies/sat_watch.py paces its thread's readings of the give-up clock on ``time.monotonic``: when to
# look, never what a plan decides (a search is cut only past the deadline on the planner's own clock,
# and a plan whose search was cut is given up: tests/scheduler/test_sat_watch.py, frozen clocks too).
CLOCK_READERS = {"clock.py", "giveup.py", "planner.py", "policies/sat_watch.py"}
TIME_MODULES = {"time", "datetime"}


def _reads_of_the_host_clock(path: Path) -> bool:
    """Whether ``path`` imports ``time`` or ``datetime`` (or anything from them)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in TIME_MODULES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TIME_MODULES:
            return True
    return False


def test_every_budget_decision_in_the_scheduler_reads_the_planning_clock() -> None:
    """The test above catches a budget read on ``perf_counter`` only; this one catches any other
    clock (``monotonic``, ``time.time``, ``datetime.now``), which a frozen-clock replay would not
    freeze: a new timed phase must read ``clock.now()``, never the host's clock."""
    core = Path(clock.__file__).parent
    readers = {str(path.relative_to(core)) for path in core.rglob("*.py") if _reads_of_the_host_clock(path)}
    assert readers == CLOCK_READERS
