"""A CP-SAT search stops once its caller's hard deadline has passed, not at its own limits; a search
without one, or before it, is the search it always was (``scheduler/policies/sat_watch.py``)."""

from __future__ import annotations

import threading
import time

from ortools.sat.python import cp_model

from scheduler import clock, giveup
from scheduler.policies.sat import new_solver, solve
from tests.scheduler.long_search import JUMP_S, LIMIT_S, JumpLater, long_search


def test_a_search_whose_hard_deadline_passes_midway_stops_with_what_it_had() -> None:
    """The clock jumps past the deadline 0.3 s into a search of ~14 s: it returns its best answer so
    far, long before its limit (main: FEASIBLE at the limit, the deadline read only after it)."""
    wall, solver = JumpLater(), new_solver(LIMIT_S, 1)
    with giveup.reading(wall), giveup.giving_up_at(1.0):
        timer = wall.start()
        status = solve(solver, long_search(), "knapsack")
    timer.join()
    assert status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    assert solver.deterministic_time < LIMIT_S / 2


def test_a_search_stops_at_a_callers_deadline_that_comes_midway() -> None:
    """On the wall clock itself (no jump): the watch reads again as the deadline falls due."""
    solver = new_solver(LIMIT_S, 1)
    with giveup.giving_up_at(time.perf_counter() + JUMP_S):
        solve(solver, long_search(), "knapsack")
    assert solver.deterministic_time < LIMIT_S / 2


def test_a_search_on_a_frozen_clock_stops_at_the_hard_deadline_too() -> None:
    """A replay's solve has no wall limit (``clock.frozen``), only its deterministic one; the caller's
    hard deadline is real time there as well (``scheduler.giveup``), and cuts it."""
    wall, solver = JumpLater(), None
    with clock.frozen(), giveup.reading(wall), giveup.giving_up_at(1.0):
        solver = new_solver(LIMIT_S, 1)
        timer = wall.start()
        solve(solver, long_search(), "knapsack")
    timer.join()
    assert solver.deterministic_time < LIMIT_S / 2


def test_a_search_without_a_hard_deadline_reads_no_clock() -> None:
    """Nothing watches it: the same solve as ever, stopped by its limits only."""
    readings: list[float] = []

    def wall() -> float:
        readings.append(0.0)
        return 0.0

    with giveup.reading(wall):
        solve(new_solver(0.05, 1), long_search(), "knapsack")
    assert readings == []


def test_a_search_whose_deadline_does_not_pass_finds_what_an_unwatched_one_finds() -> None:
    """Watched or not, one seeded worker on a deterministic limit gives the same answer (a replay's
    plan under a deadline no clock reaches is the same plan)."""

    def best(deadline: float | None) -> tuple[float, float]:
        with clock.frozen(), giveup.giving_up_at(deadline):
            solver = new_solver(0.2, 7)  # no wall limit: the host's load cannot move its end
            solve(solver, long_search(), "knapsack")
        return solver.objective_value, solver.deterministic_time

    assert best(1e300) == best(None)


def test_one_thread_watches_every_solve() -> None:
    """Solves under way at once, on threads of their own, share the one watch (no thread a solve)."""

    def solved() -> None:
        with giveup.giving_up_at(1e300):
            solve(new_solver(0.3, 1), long_search(), "knapsack")

    threads = [threading.Thread(target=solved) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [t.name for t in threading.enumerate() if t.name == "cpsat-watch"] == ["cpsat-watch"]
