"""A CP-SAT search under way as the replica stops ends there, and its plan gives up: the stop's clock
(``service/api/stopping.py``) reaches the search's watch (``scheduler/policies/sat_watch.py``), not
only the planner's checks once the search has returned at its own limit."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler import giveup
from scheduler.policies.sat import new_solver, solve
from service.api.stopping import planner_stops
from service.pipeline.deadline import NO_DEADLINE, Deadline
from service.problems.table import UnavailableError
from tests.scheduler.long_search import JUMP_S, LIMIT_S, long_search


@pytest.mark.parametrize(
    "until", [NO_DEADLINE, Deadline(time.perf_counter() + 3600.0)], ids=["none", "an hour"]
)
def test_a_search_running_at_the_stop_ends_and_its_plan_gives_up(until: Deadline) -> None:
    """The stop comes 0.3 s into a search of ~14 s: the search returns then, and the stage's check
    gives the plan up (503); main searched to its limit first."""
    stopping, solver = threading.Event(), new_solver(LIMIT_S, 1)
    timer = threading.Timer(JUMP_S, stopping.set)

    def planned() -> None:
        with (
            until.planner_gives_up(0.0) as give_up_at,
            giveup.giving_up_at(give_up_at),
            giveup.stage("search"),
        ):
            timer.start()
            solve(solver, long_search(), "knapsack")

    with pytest.raises(UnavailableError, match="replica is stopping"), planner_stops(stopping):
        planned()
    timer.join()
    assert solver.deterministic_time < LIMIT_S / 2
