"""A registration whose clock raises is logged once and read no more by the CP-SAT watch
(``sat_watch._stopped_past``, ``_Watch._run``): the others' readings go on, and the broken one is not
logged again at every reading while its solve runs on to its own limits.

Found by mutation testing (mutants13, docs/experiments.md): the log line, the key handed back and
the watch dropping it were each removable with every test passing. Fake clocks and fake stops only."""

from __future__ import annotations

import logging
import threading

import pytest

from scheduler.policies import sat_watch
from tests.scheduler.watched_solves import WAIT_S, DeadlineClock, StopRecorder


class _Counted(DeadlineClock):
    """``DeadlineClock`` raising off the registering thread, counting those readings."""

    def __init__(self) -> None:
        super().__init__(raises=True)
        self.readings = 0

    def __call__(self) -> float:
        if threading.get_ident() != self.owner:
            self.readings += 1
        return super().__call__()


def test_a_registration_whose_clock_raises_is_handed_back_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, fine = DeadlineClock(raises=True), DeadlineClock()
    broken.owner = -1  # raises on this thread too
    fine_solver = StopRecorder()
    with caplog.at_level(logging.ERROR, logger=sat_watch.__name__):
        wait_s, failed = sat_watch._stopped_past(
            [(7, (StopRecorder(), 1.0, broken)), (8, (fine_solver, 1.0, fine))]
        )
    assert failed == [7]
    assert wait_s == min(sat_watch.POLL_S, 1.0)
    assert not fine_solver.stopped.is_set()
    assert [r.getMessage() for r in caplog.records] == [
        "watching a CP-SAT search's hard deadline failed; it ends on its own limits"
    ]


def test_a_registration_whose_clock_raised_is_not_read_again() -> None:
    watch = sat_watch._WATCH  # the shared one: a watch of its own would leave a second "cpsat-watch"
    bad_wall = _Counted()
    with watch.watching(StopRecorder(), 1.0, bad_wall):
        assert bad_wall.raised.wait(WAIT_S)
        solver, wall = StopRecorder(), DeadlineClock()
        wall.passed.set()
        with watch.watching(solver, 1.0, wall):  # read at once: the watch is told of it
            assert solver.stopped.wait(WAIT_S)
    assert bad_wall.readings == 1


def test_a_solve_past_its_deadline_is_stopped_and_the_next_reading_waits_the_poll() -> None:
    solver, wall = StopRecorder(), DeadlineClock()
    wall.passed.set()  # 2.0, a second past its deadline
    wait_s, failed = sat_watch._stopped_past([(1, (solver, 1.0, wall))])
    assert solver.stopped.is_set()
    assert (wait_s, failed) == (sat_watch.POLL_S, [])
