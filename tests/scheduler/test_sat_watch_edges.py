"""The CP-SAT watch's edges (``scheduler/policies/sat_watch.py``): a clock reading the deadline itself
has passed it, and a solve that has returned is watched no more. A stand-in records the watch's stop
requests (``stop_search``), on a clock the test sets."""

from __future__ import annotations

import threading
from typing import cast

from ortools.sat.python import cp_model

from scheduler import giveup
from scheduler.policies.sat_watch import cut_at_deadline

WAIT_S = 30.0  # a bound against never, for a loaded host


class _Solver:
    """Stands for a ``CpSolver`` under way: what the watch asks of it."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop_search(self) -> None:
        self.stopped.set()


def _solver(stand_in: _Solver) -> cp_model.CpSolver:
    return cast(cp_model.CpSolver, stand_in)


def test_a_solve_whose_clock_reads_its_deadline_itself_is_stopped() -> None:
    """As ``giveup.check`` judges it: a deadline reached has passed. On the context's clock (the
    stop's, a test's), here far past any reading of the wall's ``perf_counter``."""
    solver, deadline = _Solver(), 1e12
    with giveup.reading(lambda: deadline), giveup.giving_up_at(deadline), cut_at_deadline(_solver(solver)):
        assert solver.stopped.wait(WAIT_S)


def test_a_solve_that_has_returned_is_not_stopped_once_its_deadline_passes() -> None:
    """The first solve returned before the deadline; the second, begun past it, is stopped, and the
    reading that stops it leaves the first alone (its solver may be solving another model by then)."""
    now = [0.0]
    first, second = _Solver(), _Solver()
    with giveup.reading(lambda: now[0]), giveup.giving_up_at(5.0):
        with cut_at_deadline(_solver(first)):
            pass
        now[0] = 10.0
        with cut_at_deadline(_solver(second)):
            assert second.stopped.wait(WAIT_S)
    assert not first.stopped.is_set()
