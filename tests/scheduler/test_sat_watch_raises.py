"""A registration whose clock or ``stop_search`` raises does not end the shared watch: the other
solves under way are still stopped at their deadlines (``scheduler/policies/sat_watch.py``).

Fake clocks and fake stops only: each waits on an event the watch sets, never on elapsed time."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest

from scheduler.policies import sat_watch
from tests.scheduler.watched_solves import WAIT_S, DeadlineClock, StopRecorder


def _broken(kind: str) -> tuple[StopRecorder, DeadlineClock, threading.Event]:
    """A registration that raises at the watch's first reading of it: its clock, or its stop (its
    clock past its deadline at once); and the event set once it has raised."""
    if kind == "clock":
        wall = DeadlineClock(raises=True)
        return StopRecorder(), wall, wall.raised
    solver, wall = StopRecorder(raises=True), DeadlineClock()
    wall.passed.set()
    return solver, wall, solver.stopped


@pytest.mark.parametrize("kind", ["clock", "stop"])
def test_a_registration_that_raises_leaves_the_others_watched(kind: str) -> None:
    """A solve under way, its deadline not yet passed; another registers whose clock (or stop)
    raises at the watch's reading. The first one's deadline then passes: it is still stopped
    (main: the raise ended the shared thread, and nothing stopped it until a new registration)."""
    watch = sat_watch._WATCH  # the shared one: a watch of its own would leave a second "cpsat-watch"
    solver, wall = StopRecorder(), DeadlineClock()
    bad_solver, bad_wall, raised = _broken(kind)
    with ExitStack() as held:
        held.enter_context(watch.watching(solver, 1.0, wall))
        held.enter_context(watch.watching(bad_solver, 1.0, bad_wall))
        assert raised.wait(WAIT_S)
        wall.passed.set()
        assert solver.stopped.wait(WAIT_S)


def test_the_watch_stops_solves_registered_after_one_raised() -> None:
    """The thread that read the raising registration is the one that stops the next solve: it went
    on reading, no new thread was needed (and the raising one is no longer read)."""
    watch = sat_watch._WATCH  # the shared one: a watch of its own would leave a second "cpsat-watch"
    bad_solver, bad_wall, raised = _broken("clock")
    with watch.watching(bad_solver, 1.0, bad_wall):
        assert raised.wait(WAIT_S)
        first = watch._thread
        solver, wall = StopRecorder(), DeadlineClock()
        wall.passed.set()
        with watch.watching(solver, 1.0, wall):
            assert solver.stopped.wait(WAIT_S)
    assert watch._thread is first
    assert not bad_solver.stopped.is_set()
